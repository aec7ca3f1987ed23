"""``.ci/readme``, the CI step that runs every command of README.md: what it reads from the
README, and that its lists of skipped and prepared commands match the README as it is now."""

from __future__ import annotations

import sys
from importlib.machinery import SourceFileLoader
from importlib.util import module_from_spec, spec_from_loader
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _script():
    loader = SourceFileLoader("ci_readme", str(ROOT / ".ci" / "readme"))
    spec = spec_from_loader("ci_readme", loader)
    assert spec is not None
    mod = module_from_spec(spec)
    sys.modules["ci_readme"] = mod  # its dataclasses look their module up there
    loader.exec_module(mod)
    return mod


def test_commands_are_read_from_shell_blocks_with_comments_and_continuations() -> None:
    ci = _script()
    text = ("intro `kvconf inline` is prose\n\n```bash\nkvconf run --jobs 2   # two workers\n"
            "pytest --kvconf-engine e   # a comment\n                  # that goes on\n"
            "bash a.sh && kvconf run \\\n  --expect 'x # y.toml'   # quoted hash\n```\n\n"
            "```toml\nengine = \"x\"  # not a command\n```\n")
    assert ci.readme_commands(text) == [
        "kvconf run --jobs 2", "pytest --kvconf-engine e",
        "bash a.sh && kvconf run --expect 'x # y.toml'"]


def test_every_readme_command_runs_or_is_skipped_with_a_reason_and_no_entry_is_stale() -> None:
    ci = _script()
    commands = ci.readme_commands((ROOT / "README.md").read_text(encoding="utf-8"))
    steps, stale = ci.plan(commands, cuda=False)
    assert stale == []
    ran = [c for c, why in steps if why is None]
    skipped = {c: why for c, why in steps if why is not None}
    assert all(why.strip() for why in skipped.values())
    # The examples run as written; none of the kvconf commands is skipped but for a
    # network install, TokenSpeed's sources or a CUDA device.
    assert "kvconf run --config page_size=1 --config device_pages=8" in ran
    assert "kvconf diff base/report.json head/report.json" in ran
    kvconf_skipped = sorted(c for c in skipped if "kvconf" in c and "pip install" not in c)
    assert kvconf_skipped == [
        "bash .ci/install-peers.sh && kvconf run --engine vllm --expect "
        "conformance/adapters/expectations/vllm.toml",
        "kvconf gpu --device cuda --dtype bfloat16 --memory-only"]


def test_ci_runs_the_readme_step_after_the_main_job() -> None:
    run = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "python .ci/readme" in run
    assert run.index("main job: kvconf run") < run.index("python .ci/readme")
