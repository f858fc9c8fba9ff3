"""Images: Dockerfiles rendered from profiles, and builds through the Docker SDK."""
