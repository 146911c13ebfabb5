"""cluster/: the cluster-launcher YAMLs pass Ray's schema, and both definitions match conf/cluster."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
import ray.autoscaler
import yaml

from speculab.config import PROJECT_ROOT

CLUSTER = PROJECT_ROOT / "cluster"
NODES = ("a6000x4", "h200x8")


def preset_gpus(node: str) -> int:
    return yaml.safe_load((PROJECT_ROOT / "conf" / "cluster" / f"{node}.yaml").read_text())["num_gpus"]


@pytest.mark.parametrize("node", NODES)
def test_cluster_launcher_yaml_follows_rays_schema(node: str) -> None:
    config = yaml.safe_load((CLUSTER / f"ray-{node}.yaml").read_text())
    schema = json.loads((Path(ray.autoscaler.__file__).parent / "ray-schema.json").read_text())
    jsonschema.validate(config, schema)
    start = " ".join(config["head_start_ray_commands"])
    assert f"--num-gpus={preset_gpus(node)}" in start
    assert {".venv", ".git", "mlflow.db", "mlruns"} <= set(config["rsync_exclude"])


@pytest.mark.parametrize("node", NODES)
def test_kuberay_manifest_asks_for_the_presets_gpus(node: str) -> None:
    (manifest,) = yaml.safe_load_all((CLUSTER / f"kuberay-{node}.yaml").read_text())
    assert (manifest["apiVersion"], manifest["kind"]) == ("ray.io/v1", "RayCluster")
    (group,) = manifest["spec"]["workerGroupSpecs"]
    (container,) = group["template"]["spec"]["containers"]
    gpus = str(preset_gpus(node))
    assert container["resources"]["limits"]["nvidia.com/gpu"] == gpus == group["rayStartParams"]["num-gpus"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", manifest["spec"]["rayVersion"])
