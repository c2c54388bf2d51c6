"""What the running server shows besides its MCP tools: resources and the cite prompt's outlines
(resources), the completion of their arguments (completions), the hosts' subscriptions and
change notifications (subscriptions), the web page's HTTP API (webui; the page itself is in
../webui/), the stdio transport with its bounds (stdio_transport); and what stands around the
tools: the HTTP transport's defences (http_guards), the wording of failed calls (tool_errors),
the warm-up (warmup).

May import: library.py and everything below it; never server.py or cli.py.
"""
