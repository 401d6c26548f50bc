"""What goes back to the caller: plain answers and streams, their SSE framing and headers."""
