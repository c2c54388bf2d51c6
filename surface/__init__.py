"""What the running server shows besides its MCP tools: resources and the cite prompt's
outlines (resources), the web page's HTTP API (webui; the page itself is in ../webui/), and the
stdio transport with its bounds (stdio_transport).

May import: library.py and everything below it; never server.py or cli.py.
"""
