"""The GitHub workflows: valid against GitHub's own schema (vendored in
check-jsonschema, so no network), and calling the same commands as local CI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from jitlab.course import load_course

WORKFLOWS = load_course().root / ".github" / "workflows"


def test_every_workflow_matches_githubs_schema():
    files = sorted(WORKFLOWS.glob("*.yml"))
    assert {f.name for f in files} >= {"ci.yml", "pages.yml", "upstream.yml"}
    checked = subprocess.run(
        [
            str(Path(sys.executable).with_name("check-jsonschema")),
            "--builtin-schema",
            "vendor.github-workflows",
            *map(str, files),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def _steps(name: str) -> list[dict]:
    workflow = yaml.safe_load((WORKFLOWS / name).read_text())
    return [step for job in workflow["jobs"].values() for step in job.get("steps", [])]


def test_ci_runs_exactly_the_local_ci_script():
    runs = [step.get("run", "") for step in _steps("ci.yml")]
    assert "bash .ci/run" in runs, "CI must call .ci/run, so it never drifts from local CI"


def test_pages_builds_with_the_repository_url_and_deploys():
    steps = _steps("pages.yml")
    build = next(step for step in steps if step.get("run") == "make site")
    assert "SITE_URL" in build["env"]
    assert any("deploy-pages" in step.get("uses", "") for step in steps)
    mkdocs = (load_course().root / "mkdocs.yml").read_text()
    assert "site_url: !ENV [SITE_URL" in mkdocs


def test_upstream_opens_updates_and_closes_one_issue():
    workflow = yaml.safe_load((WORKFLOWS / "upstream.yml").read_text())
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads the key `on` as True
    assert triggers["schedule"] and "workflow_dispatch" in triggers
    script = next(s for s in _steps("upstream.yml") if "github-script" in s.get("uses", ""))
    code = script["with"]["script"]
    for call in ("issues.create", "issues.update", "state: 'closed'"):
        assert call in code
