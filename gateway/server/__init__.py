"""The server's lifecycle: building the app, the runtime it serves from, live reload, overload
shedding and graceful shutdown."""
