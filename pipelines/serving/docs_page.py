"""
`GET /docs` with Swagger UI served by the server itself, from the packaged distribution
(`swagger-ui-bundle-v2`, module `swagger_ui_bundle`): FastAPI's own page loads Swagger UI from a
CDN and stays blank on a machine without the internet. Without the package, FastAPI's page is
left as it is, and `/openapi.json` is the schema either way (docs/serving.md).
"""

import logging

logger = logging.getLogger(__name__)

ASSETS_PATH = "/docs-assets"


def serve_docs_locally(app) -> bool:
    """Replace the app's `/docs` with a page whose scripts, styles and icon are served from `ASSETS_PATH`."""
    try:
        from swagger_ui_bundle import swagger_ui_path
    except ImportError:
        logger.info("swagger-ui-bundle-v2 is not installed: /docs loads Swagger UI from its CDN")
        return False
    from fastapi.openapi.docs import get_swagger_ui_html
    from starlette.requests import Request
    from starlette.staticfiles import StaticFiles

    docs_url, openapi_url, title = app.docs_url, app.openapi_url, f"{app.title} - Swagger UI"
    app.router.routes = [route for route in app.router.routes if getattr(route, "path", None) != docs_url]
    app.mount(ASSETS_PATH, StaticFiles(directory=str(swagger_ui_path)), name="swagger-ui-assets")

    async def docs_page(request: Request):
        root = request.scope.get("root_path", "")  # behind a proxy's path prefix, as FastAPI's own page
        return get_swagger_ui_html(
            openapi_url=root + openapi_url,
            title=title,
            swagger_js_url=f"{root}{ASSETS_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS_PATH}/favicon-32x32.png",
        )

    app.add_api_route(docs_url, docs_page, methods=["GET"], include_in_schema=False)
    return True
