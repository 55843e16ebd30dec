"""schedscope's web view: a Dash app over tracer's model (`schedscope web`, web.app.make_app)."""
