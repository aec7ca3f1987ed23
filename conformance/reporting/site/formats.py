"""The trace and report formats as documentation: each object of a JSON Schema as a table of
its fields (type, required or default, bounds, description), one small example trace of each
level, and the raw schemas folded beneath, all generated from the models the kit validates with.
"""

from __future__ import annotations

import json
from pathlib import Path


def _anchor(prefix: str, name: str) -> str:
    return f"{prefix}-{name}".lower()


def type_of(spec: dict, prefix: str) -> str:
    """A field's type in words, a ``$ref`` as a link to its table."""
    if "$ref" in spec:
        name = spec["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{_anchor(prefix, name)})"
    if "anyOf" in spec or "oneOf" in spec:
        alts = [type_of(a, prefix) for a in spec.get("anyOf", spec.get("oneOf", []))]
        return " or ".join(dict.fromkeys(alts))
    if "const" in spec:
        return f"`{json.dumps(spec['const'])}`"
    if "enum" in spec:
        return "one of " + ", ".join(f"`{json.dumps(v)}`" for v in spec["enum"])
    t = spec.get("type")
    if t == "array":
        items = spec.get("items")
        return f"array of {type_of(items, prefix)}" if items else "array"
    if t == "object" and isinstance(spec.get("additionalProperties"), dict):
        return f"object of {type_of(spec['additionalProperties'], prefix)}"
    if isinstance(t, list):
        return " or ".join(t)
    return t or "any"


def _bounds(spec: dict) -> str:
    parts = []
    for key, word in (("minimum", "≥"), ("maximum", "≤"), ("minLength", "length ≥"),
                      ("maxLength", "length ≤"), ("minItems", "items ≥"),
                      ("maxItems", "items ≤"), ("pattern", "matches")):
        if key in spec:
            val = f"`{spec[key]}`" if key == "pattern" else spec[key]
            parts.append(f"{word} {val}")
    return ", ".join(parts)


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def object_table(name: str, obj: dict, prefix: str, level: str = "###") -> list[str]:
    props = obj.get("properties", {})
    required = set(obj.get("required", []))
    out = [f"{level} {name} {{ #{_anchor(prefix, name)} }}", ""]
    if obj.get("description"):
        out += [_cell(obj["description"]), ""]
    if "enum" in obj:
        return out + ["One of " + ", ".join(f"`{json.dumps(v)}`" for v in obj["enum"]) + ".",
                      ""]
    if not props:
        return out + [f"Type: {type_of(obj, prefix)}.", ""]
    out += ["| field | type | required / default | description |", "| --- | --- | --- | --- |"]
    for field, spec in props.items():
        if field in required:
            need = "required"
        elif "default" in spec:
            need = f"default `{json.dumps(spec['default'])}`"
        else:
            need = "optional"
        desc = " ".join(p for p in (spec.get("description", ""), _bounds(spec)) if p)
        out.append(f"| `{field}` | {type_of(spec, prefix)} | {need} | {_cell(desc)} |")
    return out + [""]


def schema_doc(title: str, schema: dict, prefix: str, intro: str) -> list[str]:
    out = [f"## {title}", "", intro, ""]
    out += object_table(schema.get("title", prefix), schema, prefix)
    for name, obj in sorted(schema.get("$defs", {}).items()):
        out += object_table(name, obj, prefix)
    raw = json.dumps(schema, indent=2).splitlines()
    out += [f'??? note "The raw JSON Schema ({len(raw)} lines)"', "", "    ```json",
            *(f"    {line}" for line in raw), "    ```", ""]
    return out


def _compact(obj: dict) -> str:
    """One key per line, each item of a list of objects on a line of its own."""
    lines = ["{"]
    for i, (k, v) in enumerate(obj.items()):
        comma = "," if i < len(obj) - 1 else ""
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            items = [f"    {json.dumps(x)}" for x in v]
            lines += [f"  {json.dumps(k)}: [", ",\n".join(items), f"  ]{comma}"]
        else:
            lines.append(f"  {json.dumps(k)}: {json.dumps(v)}{comma}")
    return "\n".join([*lines, "}"])


def examples() -> list[str]:
    """The shortest hand-written scenario of each level, as its trace file."""
    from kvconf.conformance.cache.scenarios import SCENARIOS
    from kvconf.conformance.engine.config import EngineConfig
    from kvconf.conformance.scheduler.scenarios import SCHED_SCENARIOS
    from kvconf.conformance.trace import dump_trace

    cache = min((dump_trace(s.trace(EngineConfig(page_size=2))) for s in SCENARIOS), key=len)
    sched = min((_compact(s.trace.model_dump(mode="json", exclude_none=True))
                 for s in SCHED_SCENARIOS), key=len)
    return ["## Example traces", "",
            "The shortest hand-written scenario of each level, as `kvconf replay` reads it "
            "(a failing case saves its trace in the same form).", "",
            "A cache-level trace: the config, then the calls in order, each with the outcome "
            "the scenario expects where it states one.", "", "```json", cache, "```", "",
            "A scheduler-level trace: the config and the workload (requests arriving at plan "
            "numbers); the driver plays the runtime.", "", "```json", sched, "```", ""]


def render_formats(out: Path) -> None:
    from kvconf.conformance.mutants.kill import KillMatrix
    from kvconf.conformance.reporting.report import report_schema
    from kvconf.conformance.scheduler.trace import SchedTrace
    from kvconf.conformance.trace import trace_schema

    parts = ["# Trace and report formats", "",
             "Generated from the models the kit validates with (`kvconf schema trace`, "
             "`kvconf schema report` print the JSON Schemas): each object as a table of its "
             "fields, an example trace of each level, and each raw schema folded at the end of "
             "its section.", ""]
    parts += examples()
    for title, schema, prefix, intro in (
            ("Cache-level trace (`kvconf-trace/1`)", trace_schema(), "trace",
             "Played against an engine's prefix cache, one call per step."),
            ("Scheduler-level trace", SchedTrace.model_json_schema(), "sched",
             "A workload for a scheduler: requests, their arrivals and the faults to inject."),
            ("Run report (`kvconf-report/2`)", report_schema(), "report",
             "What `kvconf run --report` writes."),
            ("Kill matrix (`kvconf-kill-matrix/1`)", KillMatrix.model_json_schema(), "kill",
             "What `kvconf mutants --report` writes.")):
        parts += schema_doc(title, schema, prefix, intro)
    (out / "formats.md").write_text("\n".join(parts), encoding="utf-8")
