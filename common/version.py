"""linecite's version, said once: the MCP handshake's serverInfo.version and `--version`.

Layer: none (a constant any module may import; it imports nothing).
"""

VERSION = "0.9.0"
