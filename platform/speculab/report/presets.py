"""The paper-table presets (`conf/experiment/<name>.yaml`) as the report reads them: which MLflow
experiment a preset's runs go to, and its `report:` layout (`config.report`), checked as a run's
config is."""

from __future__ import annotations

import re

from omegaconf import OmegaConf

from speculab.config import PROJECT_ROOT
from speculab.config.report import ReportConfig, report_errors
from speculab.report.points import ReportError

PRESETS_DIR = PROJECT_ROOT / "conf" / "experiment"
DEFAULT = "default"  # the layout of runs that no preset made


def presets() -> list[str]:
    return sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))


def preset_experiment(preset: str) -> str:
    """The MLflow experiment a preset's runs go to (its `tracking.experiment`)."""
    if preset not in presets():
        raise ReportError(f"unknown preset {preset!r}; presets (conf/experiment/): {', '.join(presets())}")
    return str(OmegaConf.select(OmegaConf.load(PRESETS_DIR / f"{preset}.yaml"), "tracking.experiment", default=preset))


def preset_report(preset: str) -> ReportConfig:
    """A preset's `report:` section over the schema's defaults (none for the default layout);
    ReportError naming every bad field."""
    if preset == DEFAULT:
        return ReportConfig()
    given = OmegaConf.select(OmegaConf.load(PRESETS_DIR / f"{preset}.yaml"), "report", default={})
    report = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ReportConfig), given))
    assert isinstance(report, ReportConfig)
    if errors := report_errors(report):
        raise ReportError(f"conf/experiment/{preset}.yaml: " + "; ".join(errors))
    return report


def layout_of_experiment(name: str) -> str:
    """The preset writing to this experiment (the one named after it first), else the default layout."""
    writers = [p for p in presets() if preset_experiment(p) == name]
    return name if name in writers else next(iter(writers), DEFAULT)


def layout_of_sweep(overrides: str) -> str:
    """The preset a sweep ran (`+experiment=NAME` among its overrides), else the default layout."""
    found = re.search(r"\+experiment=(\S+)", overrides)
    return found.group(1) if found and found.group(1) in presets() else DEFAULT
