"""The live stream and metrics served from EngineCore, and the viewer's client for them."""
