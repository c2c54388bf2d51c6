"""Set-up helpers the installers run through cli.py (`cli.py verify`, `host-config`,
`launcher`, `tessdata`): the install check and first-hour self-test (verify_install), the MCP
host config block and Claude Desktop's file (mcp_config), the bin/linecite launcher (launcher),
and Tesseract's Korean and Chinese data for Windows (tessdata).

May import: common/ and index/ only; the server is started as a process, never imported.
"""
