"""Validate the example payloads in spec/examples/ against the MAIL schemas and openapi.yaml.

    uv run spec/validate_samples.py                 # every file in spec/examples/
    uv run spec/validate_samples.py FILE [FILE...]  # just these files

Which schema applies is decided by the file name:

    mail_message_*.json                    MAIL-core.schema.json (a MAILMessage)
    interswarm_*.json                      MAIL-interswarm.schema.json (an envelope)
    http_<operationId>_request*.json       that operation's JSON request body in openapi.yaml
    http_<operationId>_response*.json      that operation's 200 JSON response in openapi.yaml

The script first checks that every schema in openapi.yaml is itself a valid JSON Schema and
that its references resolve. It prints one line per file and exits with status 1 if anything
is invalid (2 for a usage error).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import best_match
from referencing import Registry
from referencing.jsonschema import DRAFT202012

SPEC_DIR = Path(__file__).resolve().parent
EXAMPLES_DIR = SPEC_DIR / "examples"
BASE_URI = "https://github.com/charonlabs/mail/spec/"
OPENAPI_URI = BASE_URI + "openapi.yaml"
SCHEMA_FILES = ("MAIL-core.schema.json", "MAIL-interswarm.schema.json")
HTTP_METHODS = ("get", "put", "post", "delete", "patch", "options", "head")


def load_openapi() -> dict[str, Any]:
    with (SPEC_DIR / "openapi.yaml").open(encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def build_registry(openapi: dict[str, Any]) -> Registry:
    resources = []
    for name in SCHEMA_FILES:
        schema = json.loads((SPEC_DIR / name).read_text(encoding="utf-8"))
        resources.append((schema.get("$id", BASE_URI + name), DRAFT202012.create_resource(schema)))
    resources.append((OPENAPI_URI, DRAFT202012.create_resource(openapi)))
    return Registry().with_resources(resources)


def _pointer(parts: list[str]) -> str:
    return "/".join(p.replace("~", "~0").replace("/", "~1") for p in parts)


def operations(openapi: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(path, method, operation) for every operation in the document."""
    for path, item in openapi.get("paths", {}).items():
        for method in HTTP_METHODS:
            if method in item:
                yield path, method, item[method]


def _deref(openapi: dict[str, Any], obj: Any) -> tuple[Any, list[str] | None]:
    """Follow a local OpenAPI ``$ref`` (request bodies, responses); returns (object, its path)."""
    if isinstance(obj, dict) and "$ref" in obj and str(obj["$ref"]).startswith("#/"):
        parts = obj["$ref"][2:].split("/")
        target: Any = openapi
        for part in parts:
            target = target[part.replace("~1", "/").replace("~0", "~")]
        return target, parts
    return obj, None


def operation_schema_pointer(
    openapi: dict[str, Any], operation_id: str, kind: str, status: str = "200"
) -> str:
    """JSON pointer (within openapi.yaml) of an operation's JSON request or response schema."""
    for path, method, op in operations(openapi):
        if op.get("operationId") != operation_id:
            continue
        if kind == "request":
            node, parts = _deref(openapi, op.get("requestBody"))
            base = parts or ["paths", path, method, "requestBody"]
        else:
            node, parts = _deref(openapi, op.get("responses", {}).get(status))
            base = parts or ["paths", path, method, "responses", status]
        if not node or "application/json" not in node.get("content", {}):
            raise KeyError(f"operation '{operation_id}' has no JSON {kind} body")
        return "#/" + _pointer([*base, "content", "application/json", "schema"])
    raise KeyError(f"no operation '{operation_id}' in openapi.yaml")


def validator_for_ref(ref: str, registry: Registry) -> Draft202012Validator:
    return Draft202012Validator({"$ref": ref}, registry=registry, format_checker=FormatChecker())


def schema_ref_for_example(path: Path, openapi: dict[str, Any]) -> str:
    name = path.stem
    if name.startswith("mail_message"):
        return BASE_URI + "MAIL-core.schema.json"
    if name.startswith("interswarm_"):
        return BASE_URI + "MAIL-interswarm.schema.json"
    if name.startswith("http_"):
        rest = name[len("http_") :]
        for kind in ("request", "response"):
            marker = f"_{kind}"
            if marker in rest:
                operation_id = rest[: rest.index(marker)]
                return OPENAPI_URI + operation_schema_pointer(openapi, operation_id, kind)
    raise KeyError(f"{path.name}: cannot tell which schema applies (see the naming rules)")


def check_openapi(openapi: dict[str, Any], registry: Registry) -> list[str]:
    """Problems with openapi.yaml itself: invalid schemas or references that don't resolve."""
    problems: list[str] = []
    for name, schema in openapi.get("components", {}).get("schemas", {}).items():
        try:
            Draft202012Validator.check_schema(schema)
        except Exception as exc:  # noqa: BLE001 - reported, not raised
            problems.append(f"components.schemas.{name}: {exc}")
    resolver = registry.resolver(base_uri=OPENAPI_URI)
    for path, method, op in operations(openapi):
        for kind, statuses in (("request", ["200"]), ("response", list(op.get("responses", {})))):
            for status in statuses:
                try:
                    pointer = operation_schema_pointer(openapi, op["operationId"], kind, status)
                except KeyError:
                    continue
                try:
                    schema = resolver.lookup(pointer).contents
                    _resolve_all(schema, registry.resolver(base_uri=OPENAPI_URI))
                except Exception as exc:  # noqa: BLE001
                    problems.append(f"{method.upper()} {path} {kind} {status}: {exc}")
    return problems


def _resolve_all(node: Any, resolver: Any) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            resolver.lookup(ref)
        for value in node.values():
            _resolve_all(value, resolver)
    elif isinstance(node, list):
        for value in node:
            _resolve_all(value, resolver)


def validate_file(path: Path, openapi: dict[str, Any], registry: Registry) -> str | None:
    """None when ``path`` is valid, else a one-line reason."""
    try:
        instance = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return f"cannot read JSON: {exc}"
    try:
        ref = schema_ref_for_example(path, openapi)
    except KeyError as exc:
        return str(exc.args[0])
    error = best_match(validator_for_ref(ref, registry).iter_errors(instance))
    if error is None:
        return None
    where = ".".join(str(p) for p in error.absolute_path) or "<root>"
    return f"{where}: {error.message}"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if any(a in ("-h", "--help") for a in args):
        print(__doc__)
        return 0
    openapi = load_openapi()
    registry = build_registry(openapi)
    failed = 0
    for problem in check_openapi(openapi, registry):
        print(f"FAIL openapi.yaml: {problem}")
        failed += 1
    files = [Path(a) for a in args] if args else sorted(EXAMPLES_DIR.glob("*.json"))
    if not files:
        print(f"no example files found in {EXAMPLES_DIR}", file=sys.stderr)
        return 2
    for path in files:
        reason = validate_file(path, openapi, registry)
        if reason is None:
            print(f"ok   {path.name}")
        else:
            print(f"FAIL {path.name}: {reason}")
            failed += 1
    print(f"{failed} problem(s)" if failed else f"all {len(files)} examples valid")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
