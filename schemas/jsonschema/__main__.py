"""`python -m schemas.jsonschema write|--check`: the topics' JSON Schemas and docs/topics.md.

write    regenerate schemas/jsonschema/<topic>.json and docs/topics.md from the schemas/ types
--check  exit 1, naming the stale files, when the committed ones differ from what write makes
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import orjson

from schemas.jsonschema import all_schemas
from schemas.jsonschema.topics_doc import topics_markdown

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DOC = REPO / "docs" / "topics.md"


def generated() -> dict[Path, bytes]:
    """Every generated file (path -> its bytes)."""
    out = {
        HERE / f"{logical}.json": orjson.dumps(schema, option=orjson.OPT_INDENT_2) + b"\n"
        for logical, schema in all_schemas().items()
    }
    out[DOC] = topics_markdown().encode()
    return out


def stale() -> list[Path]:
    """Generated files that are missing or differ, and schema files no topic has any more."""
    files = generated()
    wrong = [p for p, data in files.items() if not p.exists() or p.read_bytes() != data]
    extra = [p for p in HERE.glob("*.json") if p not in files]
    return sorted(wrong + extra)


def write() -> list[Path]:
    files = generated()
    for path in HERE.glob("*.json"):
        if path not in files:
            path.unlink()
    changed = []
    for path, data in files.items():
        if not path.exists() or path.read_bytes() != data:
            path.write_bytes(data)
            changed.append(path)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m schemas.jsonschema", description=__doc__)
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("action", nargs="?", choices=["write"], help="regenerate the files")
    group.add_argument("--check", action="store_true", help="exit 1 when a file is stale")
    args = parser.parse_args(argv)
    if args.check:
        bad = stale()
        for path in bad:
            print(f"stale: {path.relative_to(REPO)}", file=sys.stderr)
        if bad:
            print("run: python -m schemas.jsonschema write", file=sys.stderr)
            return 1
        print(f"{len(generated())} generated files are current")
        return 0
    for path in write():
        print(f"wrote {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
