"""OIP over REST: the HTTP/1.1 hot path and its streams, the control calls, the repository API over REST."""
