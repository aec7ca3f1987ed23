"""The defect catalog and its seeds as pages: each defect with the seed discussion it comes
from, the behaviours that guard it and the mutants that plant it."""

from __future__ import annotations

import tomllib
from pathlib import Path

from kvconf.conformance.errors import KitError
from kvconf.conformance.reporting.site.cards import Facts
from kvconf.spec.registry import Registry


def seeds(spec_dir: Path) -> dict[str, dict]:
    data = tomllib.loads((spec_dir / "seeds.toml").read_text(encoding="utf-8"))
    return {s["id"]: s for s in data["seed"]}


def render_catalog(reg: Registry, spec_dir: Path, out: Path, facts: Facts) -> None:
    guarded = reg.guarded_by()
    seed = seeds(spec_dir)
    lines = ["# The defect catalog", "",
             "Real scheduler defects, each with a stable ID, the seed discussion it comes from, "
             "the behaviours that guard it and the mutants that plant it.", ""]
    for d in sorted(reg.catalog.values(), key=lambda d: d.id):
        if d.seed not in seed:
            raise KitError(f"spec/catalog.toml: {d.id}.seed: {d.seed} is not in spec/seeds.toml")
        beh = [f"[{b}](spec/{reg.chapters[reg.behaviours[b].chapter].name}#{b})"
               for b in guarded[d.id]]
        muts = [f"`{m}`" for m in facts.mutants.get(d.id, [])]
        pr = f", PR {d.pr}" if d.pr else ""
        lines += [f"## {d.id} {{ #{d.id} }}", "",
                  d.title + (" *(performance)*" if d.perf else ""), "",
                  f"- seed: [{d.seed}](seeds.md#seed-{d.seed}){pr}"]
        if beh:
            lines.append(f"- guarded by: {', '.join(beh)}")
        if muts:
            lines.append(f"- planted by the mutants: {', '.join(muts)}")
        lines.append("")
    (out / "catalog.md").write_text("\n".join(lines), encoding="utf-8")
    s = ["# Seeds", "", "The pull-request discussions the catalog's defects were found in.", ""]
    for sid, meta in seed.items():
        ids = [f"[{d.id}](catalog.md#{d.id})" for d in reg.catalog.values() if d.seed == sid]
        pr = f" (PR {meta['pr']})" if meta.get("pr") else ""
        s += [f"## {sid}: {meta['title']}{pr} {{ #seed-{sid} }}", "", meta["topic"] + ".", ""]
        if ids:
            s += [f"Defects: {', '.join(ids)}", ""]
    (out / "seeds.md").write_text("\n".join(s), encoding="utf-8")
