"""``MCPServer.from_openapi``: tools from an OpenAPI 3.1 document, calling a real HTTP API (a
Starlette app served by uvicorn on 127.0.0.1) through the server's one call path."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from support.http import serve_in_thread

from sturdyrpc.mcp import MCPServer

pytestmark = pytest.mark.timeout(60)

SECRET = "db password is hunter2"


def _app() -> Starlette:
    pets = {1: {"id": 1, "name": "Rex", "species": "dog"}, 2: {"id": 2, "name": "Tom", "species": "cat"}}

    async def get_pet(request: Request) -> Response:
        pet = pets.get(int(request.path_params["pet_id"]))
        if pet is None:
            return JSONResponse({"detail": SECRET}, status_code=404)
        return JSONResponse(pet)

    async def list_pets(request: Request) -> Response:
        found = [p for p in pets.values() if request.query_params.get("species") in (None, p["species"])]
        return JSONResponse(found[: int(request.query_params.get("limit", "100"))])

    async def create_pet(request: Request) -> Response:
        data = await request.json()
        pet = {"id": len(pets) + 1, "name": data["name"], "species": data.get("species", "dog")}
        pets[pet["id"]] = pet
        return JSONResponse({**pet, "by": request.headers.get("x-caller")}, status_code=201)

    async def delete_pet(request: Request) -> Response:
        pets.pop(int(request.path_params["pet_id"]), None)
        return Response(status_code=204)

    return Starlette(routes=[
        Route("/pets/{pet_id:int}", get_pet, methods=["GET"]),
        Route("/pets/{pet_id:int}", delete_pet, methods=["DELETE"]),
        Route("/pets", list_pets, methods=["GET"]),
        Route("/pets", create_pet, methods=["POST"]),
    ])


PET = {"type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "string"}, "species": {"type": "string"}},
       "required": ["id", "name"]}


def _spec(base: str) -> dict[str, Any]:
    pet_id = {"name": "pet_id", "in": "path", "required": True, "schema": {"type": "integer"}, "description": "The pet's id."}
    json_pet = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Pet"}}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "pets", "version": "1"},
        "servers": [{"url": base}],
        "components": {"schemas": {"Pet": PET}},
        "paths": {
            "/pets/{pet_id}": {
                "parameters": [pet_id],
                "get": {"operationId": "get_pet", "summary": "One pet.", "responses": {"200": {"description": "ok", **json_pet}, "404": {"description": "none"}}},
                "delete": {"responses": {"204": {"description": "gone"}}},
            },
            "/pets": {
                "get": {"operationId": "list_pets", "summary": "The pets.",
                        "parameters": [{"name": "species", "in": "query", "schema": {"type": "string"}},
                                       {"name": "limit", "in": "query", "schema": {"type": "integer"}}],
                        "responses": {"200": {"description": "ok", "content": {"application/json": {"schema": {"type": "array", "items": {"$ref": "#/components/schemas/Pet"}}}}}}},
                "post": {"operationId": "create_pet", "summary": "Add a pet.",
                         "parameters": [{"name": "x-caller", "in": "header", "schema": {"type": "string"}}],
                         "requestBody": {"required": True, "content": {"application/json": {"schema": {
                             "type": "object", "properties": {"name": {"type": "string"}, "species": {"type": "string"}}, "required": ["name"]}}}},
                         "responses": {"201": {"description": "made", "content": {"application/json": {"schema": {"type": "object"}}}}}},
            },
        },
    }


@pytest.fixture(scope="module")
def api() -> Iterator[str]:
    with serve_in_thread(_app()) as base:
        yield base


def test_tools_and_schemas_from_the_document(api: str) -> None:
    server = MCPServer.from_openapi(_spec(api), name="pets")

    async def main() -> None:
        async with server.test_client("2025-11-25") as c:
            tools = {t["name"]: t for t in await c.list_tools()}
            assert set(tools) == {"get_pet", "delete_pets_pet_id", "list_pets", "create_pet"}
            assert tools["get_pet"]["description"] == "One pet."
            assert tools["get_pet"]["inputSchema"] == {"type": "object", "required": ["pet_id"], "properties": {
                "pet_id": {"type": "integer", "description": "The pet's id."}}}
            assert tools["get_pet"]["outputSchema"] == PET  # the $ref inlined
            assert tools["list_pets"]["outputSchema"]["properties"]["result"]["items"] == PET
            assert "required" not in tools["list_pets"]["inputSchema"]
            assert tools["create_pet"]["inputSchema"]["properties"].keys() == {"x-caller", "name", "species"}
            assert tools["create_pet"]["inputSchema"]["required"] == ["name"]
            assert "outputSchema" not in tools["delete_pets_pet_id"]

    asyncio.run(main())


CALLS = [
    ("get_pet", {"pet_id": 1}, False, {"id": 1, "name": "Rex", "species": "dog"}),
    ("list_pets", {"species": "cat"}, False, {"result": [{"id": 2, "name": "Tom", "species": "cat"}]}),
    ("list_pets", {"limit": 1}, False, {"result": [{"id": 1, "name": "Rex", "species": "dog"}]}),
    ("create_pet", {"name": "Kit", "species": "cat", "x-caller": "tester"}, False, {"id": 3, "name": "Kit", "species": "cat", "by": "tester"}),
    ("get_pet", {"pet_id": 99}, True, "GET /pets/99: HTTP 404 Not Found"),
    ("delete_pets_pet_id", {"pet_id": 3}, False, None),
]


@pytest.mark.parametrize("version", ["2025-11-25", "2026-07-28"])
def test_calls_reach_the_api(api: str, version: str) -> None:
    server = MCPServer.from_openapi(_spec(api), name="pets")

    async def main() -> None:
        async with server.test_client(version) as c:
            for name, args, is_error, expected in CALLS:
                r = await c.call_tool(name, args)
                assert r["isError"] is is_error, (name, r)
                if is_error:
                    assert r["content"][0]["text"] == expected and SECRET not in str(r)
                elif expected is None:
                    assert r["content"] == [] and "structuredContent" not in r
                else:
                    assert r["structuredContent"] == expected

    asyncio.run(main())


@pytest.mark.parametrize(("show", "shown"), [(False, False), (True, True)])
def test_error_bodies_only_when_asked(api: str, show: bool, shown: bool) -> None:
    async def main() -> None:
        async with httpx.AsyncClient(base_url=api) as client:
            server = MCPServer.from_openapi(_spec("/relative"), client, show_error_bodies=show)
            async with server.test_client() as c:
                r = await c.call_tool("get_pet", {"pet_id": 42})
                assert r["isError"] is True and (SECRET in r["content"][0]["text"]) is shown

    asyncio.run(main())


def test_a_client_without_a_base_url_gets_the_documents(api: str) -> None:
    async def main() -> None:
        async with httpx.AsyncClient() as client:
            server = MCPServer.from_openapi(_spec(api), client)
            async with server.test_client() as c:
                r = await c.call_tool("get_pet", {"pet_id": 2})
                assert r["structuredContent"]["name"] == "Tom"

    asyncio.run(main())


def test_an_unreachable_api_is_a_tool_error() -> None:
    from support.http import free_port

    server = MCPServer.from_openapi(_spec(f"http://127.0.0.1:{free_port()}"))

    async def main() -> None:
        async with server.test_client() as c:
            r = await c.call_tool("get_pet", {"pet_id": 1})
            assert r["isError"] is True and r["content"][0]["text"] == "GET /pets/1: the request failed (ConnectError)"

    asyncio.run(main())


@pytest.mark.parametrize(("spec", "message"), [
    ({"swagger": "2.0", "paths": {}}, "OpenAPI 3.0 or 3.1"),
    ({"openapi": "3.0.3"}, "a mapping with 'paths'"),
    ({"openapi": "3.0.3", "paths": {}, "servers": [{"url": "/api"}]}, "no base URL"),
])
def test_documents_refused(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        MCPServer.from_openapi(spec)
