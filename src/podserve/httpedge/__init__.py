"""What both HTTP edges (the pod's `server/`, the gateway's `gateway/`) add to uvicorn's
httptools protocol: connection bounds that answer in JSON (`limits`) and one write per
response (`coalesce`); and where a request body is decoded (`decoding`: a big one off
the event loop). A layer of its own under both, which import neither each other nor
anything of the serving path from here."""
