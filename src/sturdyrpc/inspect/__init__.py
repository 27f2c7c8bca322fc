"""``sturdyrpc inspect``: a local web inspector that shows the traffic of an MCP server and says
which message breaks which rule.

One job per module, bottom up: :mod:`.session` (the judged timeline, sans I/O: the
``trace`` monitor's verdicts on each message, replies paired with requests, the export as a
``trace --log`` file), :mod:`.tap` (the transport wrapper that feeds it), :mod:`.connector`
(the MCP client on the server, the calls and elicitations of the page, ``check``),
:mod:`.app` (the ASGI app: page, static files, JSON API, behind the token and the HTTP layer's
Host/Origin checks), :mod:`.serve` (uvicorn on 127.0.0.1). The front end is plain HTML, CSS
and JavaScript in ``static/``, committed as it is served: no build step, no CDN.
"""
