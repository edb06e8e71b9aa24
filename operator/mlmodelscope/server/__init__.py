"""`mlms serve`: the results store over HTTP (a FastAPI JSON API with its OpenAPI document) and
the web dashboard, served by one process.

``create_app(ServeSettings(...))`` builds the ASGI app; ``mlms serve`` runs it with uvicorn.
"""
