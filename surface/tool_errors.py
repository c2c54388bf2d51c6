"""What an agent reads when a tool call goes wrong: integer arguments bounded in their schema
(`whole`), pydantic's report on a wrong argument turned into one sentence that says what is
allowed (PlainArgumentErrors), and a failure inside linecite or a library turned into one
sentence that says what to do, its traceback sent to stderr (NoInternalErrors).

Layer: surface: below server.py (which types its tools' arguments with `whole` and installs
the middlewares), above limits.py.
"""

from __future__ import annotations

import sys
import traceback
from typing import Annotated

from fastmcp.exceptions import FastMCPError, ToolError, ValidationError
from fastmcp.server.middleware import Middleware
from pydantic import BeforeValidator, Field
from pydantic import ValidationError as PydanticError
from pydantic_core import PydanticCustomError

from common import limits


def refuse_bool(value: object) -> object:
    """`true` is no number, but pydantic's lax mode reads it as 1. Lax mode stays: hosts send
    numbers as "5" or 5.0 (Claude Desktop, Cursor), and JSON Schema calls 5.0 an integer."""
    if isinstance(value, bool):
        raise PydanticCustomError("int_type", "Input should be a valid integer")
    return value


def whole(low: int, high: int, description: str) -> object:
    """An integer argument's type: bounded both ways, both bounds stated in its schema
    (minimum, maximum and the description), so 2**63 never reaches SQLite."""
    return Annotated[int, Field(ge=low, le=high, description=f"{description} ({low} to {high:,})"),
                     BeforeValidator(refuse_bool)]  # after Field, or the schema loses the bounds


KIND_WORDS = {"int_parsing": "a whole number", "int_type": "a whole number",
              "int_from_float": "a whole number", "bool_parsing": "true or false",
              "bool_type": "true or false", "string_type": "text"}


def argument_errors(tool: str, err: PydanticError, known: list[str]) -> str:
    """pydantic's report as sentences that say what is allowed (no URL, no type names)."""
    sentences = []
    for detail in err.errors(include_url=False):
        name = ".".join(str(part) for part in detail["loc"]) or "arguments"
        ctx, kind = detail.get("ctx") or {}, detail["type"]
        if kind in ("missing", "missing_argument"):
            sentences.append(f"{name} is required")
        elif kind in KIND_WORDS:
            sentences.append(f"{name} must be {KIND_WORDS[kind]}")
        elif kind == "unexpected_keyword_argument":
            sentences.append(f"{tool} has no argument {limits.shown(name)}; its arguments "
                             f"are: {', '.join(known)}")
        elif kind in ("less_than_equal", "greater_than_equal", "less_than", "greater_than"):
            bound = {"less_than_equal": "at most", "greater_than_equal": "at least",
                     "less_than": "less than", "greater_than": "more than"}[kind]
            limit = next(iter(ctx.values()), "")
            sentences.append(f"{name} must be {bound} {limit:,}" if isinstance(limit, int)
                             else f"{name} must be {bound} {limit}")
        elif kind == "too_long":
            sentences.append(f"{name} holds {ctx.get('actual_length')} items; send at most "
                             f"{ctx.get('max_length')}")
        elif kind == "literal_error":
            sentences.append(f"{name} must be one of {ctx.get('expected', '')}")
        else:
            sentences.append(f"{name} is not valid here ({detail['msg'].lower()})")
    return f"{tool}: " + "; ".join(sentences) + "."


class PlainArgumentErrors(Middleware):
    """A wrong argument gets one sentence in our voice, not pydantic's report and its URL."""

    async def on_call_tool(self, context, call_next):
        try:
            return await call_next(context)
        except ValidationError as err:
            if not isinstance(err.__cause__, PydanticError):
                raise
            name = context.message.name
            tool = await context.fastmcp_context.fastmcp.get_tool(name)
            known = list(tool.parameters.get("properties", {})) if tool else []
            raise ToolError(argument_errors(name, err.__cause__, known)) from None


class NoInternalErrors(Middleware):
    """A failure inside linecite or a library (Chroma's, SQLite's) reaches the agent as one
    sentence that says what to do; its text and traceback go to stderr, the host's log.
    fastmcp would send `str(err)`: a path, or "'RustBindingsAPI' object has no attribute"."""

    async def on_call_tool(self, context, call_next):
        try:
            return await call_next(context)
        except ToolError as err:
            cause = err.__cause__
            if cause is None or isinstance(cause, FastMCPError):
                raise  # ours (UserError, argument errors) or fastmcp's own words
            name = context.message.name
            print(f"linecite: {name} failed inside the server:", file=sys.stderr)
            traceback.print_exception(cause, file=sys.stderr)
            raise ToolError(f"{name} failed inside the server; nothing already indexed was "
                            "lost. Try the call again; if it fails again, the server's log "
                            "(its stderr, in the host's MCP log) says why") from None
