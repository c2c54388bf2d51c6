"""Our dependencies' private names, each behind one small module that states the versions it was
written for (`WRITTEN_FOR`, checked by tests/test_adapters.py through `versions.problem`):
fastmcp's and mcp's request handlers, a request's connection and stdio plumbing
(mcp_internals), chromadb's per-path client cache (chroma_clients), pdfminer's text-box
grouping with a stable order (pdfminer_layout). Nothing else in the project touches a
dependency's underscore names.

May import: nothing of ours (the ground floor, beside common/).
"""
