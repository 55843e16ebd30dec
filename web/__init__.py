"""schedscope web view. Not built yet: see the open issue for the web app."""
