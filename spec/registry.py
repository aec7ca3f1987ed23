"""The behaviour registry as validated data (pydantic), so tools can audit it."""

from __future__ import annotations

import re
import tomllib
from enum import Enum
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

SPEC_DIR = Path(__file__).resolve().parent
BEHAVIOUR_ID = re.compile(r"^[A-Z][A-Z0-9]*-[0-9]+$")
FEATURE_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
DEFECT_ID = re.compile(r"^(D[0-9]+|E)-[0-9]+$")


class SpecError(Exception):
    """The registry or catalog files are malformed; the message names the file and field."""


class Level(str, Enum):
    MUST = "MUST"
    MUST_NOT = "MUST NOT"
    SHOULD = "SHOULD"
    MAY = "MAY"


class Behaviour(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    level: Level
    statement: str = Field(min_length=10)
    rationale: str = Field(min_length=10)
    guards: tuple[str, ...] = ()
    # The allowances (``kvconf.ALLOWANCES``) under which another behaviour than this rule's is
    # legal: a failure of the rule may be an engine's legal choice that it did not declare, and
    # the report says which declaration would make it so.
    allowances: tuple[str, ...] = ()
    # The features an engine declares for the rule to bind it (a host tier, KV events, ...):
    # an engine without one of them is never judged on the rule (chapter faults, "Verdicts of
    # a rule"). A chapter file's top-level ``needs`` is the default of its entries; an entry's
    # own ``needs`` replaces it. Plain names here; the kit checks they are features.
    needs: tuple[str, ...] = ()
    chapter: str = ""

    @field_validator("id")
    @classmethod
    def _id_shape(cls, v: str) -> str:
        if not BEHAVIOUR_ID.match(v):
            raise ValueError(f"behaviour id {v!r} is not of the form PREFIX-N")
        return v

    @field_validator("needs")
    @classmethod
    def _needs_shape(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for n in v:
            if not FEATURE_NAME.match(n):
                raise ValueError(f"feature name {n!r} is not a lower-case identifier")
        return v

    @field_validator("guards")
    @classmethod
    def _guard_shape(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for g in v:
            if not DEFECT_ID.match(g):
                raise ValueError(f"catalog id {g!r} is not of the form D<pr>-N or E-N")
        return v


class Defect(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    seed: str
    pr: int | None = None
    perf: bool = False
    title: str


class Registry(BaseModel):
    model_config = ConfigDict(frozen=True)

    behaviours: dict[str, Behaviour]
    catalog: dict[str, Defect]
    chapters: dict[str, Path]

    def guarded_by(self) -> dict[str, list[str]]:
        """Catalog ID -> IDs of the behaviours that guard it (empty list when none yet)."""
        out: dict[str, list[str]] = {d: [] for d in self.catalog}
        for b in self.behaviours.values():
            for g in b.guards:
                out.setdefault(g, []).append(b.id)
        return out


def _read_toml(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{path}: {e}") from None


def _where(path: Path, table: str, index: int, err: ValidationError) -> str:
    first = err.errors()[0]
    field = ".".join(str(p) for p in first["loc"]) or "<entry>"
    return f"{path}: {table}[{index}].{field}: {first['msg']}"


def _allowance_names() -> frozenset[str]:
    """The allowances' names; imported late, so that the spec loads without the kit."""
    from kvconf.conformance.engine.features import ALLOWANCES

    return frozenset(f.value for f in ALLOWANCES)


@lru_cache(maxsize=4)
def load_registry(spec_dir: Path = SPEC_DIR) -> Registry:
    """Load and validate every registry file, the catalog and the chapter list."""
    catalog: dict[str, Defect] = {}
    cat_path = spec_dir / "catalog.toml"
    for i, raw in enumerate(_read_toml(cat_path).get("defect", [])):
        try:
            d = Defect.model_validate(raw)
        except ValidationError as e:
            raise SpecError(_where(cat_path, "defect", i, e)) from None
        if d.id in catalog:
            raise SpecError(f"{cat_path}: defect[{i}].id: {d.id} appears twice")
        catalog[d.id] = d
    behaviours: dict[str, Behaviour] = {}
    chapters: dict[str, Path] = {}
    for path in sorted((spec_dir / "registry").glob("*.toml")):
        chapter = path.stem
        chapters[chapter] = spec_dir / "chapters" / f"{chapter}.md"
        doc = _read_toml(path)
        default = doc.get("needs", [])
        if not isinstance(default, list) or not all(isinstance(n, str) for n in default):
            raise SpecError(f"{path}: needs: a list of feature names, not {default!r}")
        for i, raw in enumerate(doc.get("behaviour", [])):
            try:
                b = Behaviour.model_validate({"needs": default, **raw, "chapter": chapter})
            except ValidationError as e:
                raise SpecError(_where(path, "behaviour", i, e)) from None
            if b.id in behaviours:
                raise SpecError(f"{path}: behaviour[{i}].id: {b.id} is already defined")
            unknown = [g for g in b.guards if g not in catalog]
            if unknown:
                raise SpecError(
                    f"{path}: behaviour[{i}].guards: {', '.join(unknown)} not in the catalog"
                )
            bad = [a for a in b.allowances if a not in _allowance_names()]
            if bad:
                raise SpecError(
                    f"{path}: behaviour[{i}].allowances: {', '.join(bad)} not an allowance "
                    "(kvconf.ALLOWANCES)"
                )
            behaviours[b.id] = b
    return Registry(behaviours=behaviours, catalog=catalog, chapters=chapters)
