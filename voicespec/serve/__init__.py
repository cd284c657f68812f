"""Real-time serving: the WebSocket protocol, sessions, the decode scheduler, metrics, the client."""
