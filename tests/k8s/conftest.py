"""The schemas rendered manifests are checked against: each CRD's served versions, strict as
`kubectl --validate=strict` (the API server would silently prune an unknown field)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml


def _strict(schema):
    """Reject unknown fields like `kubectl --validate=strict` (the API server would silently prune them)."""
    schema = copy.deepcopy(schema)

    def walk(node):
        if isinstance(node, dict):
            if (
                "properties" in node
                and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")
            ):
                node["additionalProperties"] = False
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(schema)
    return schema


# The CRDs of the kinds rendered here (the KubeRay ones are megabytes: parse only what is needed, with libyaml).
CRD_FILES = ("batch.volcano.sh_jobs.yaml", "ray.io_rayjobs.yaml")


@pytest.fixture(scope="module")
def crd_schemas(shared_dir: Path):
    schemas = {}
    for name in CRD_FILES:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        crd = yaml.load((shared_dir / "schemas" / "crds" / name).read_text(), Loader=loader)
        for version in crd["spec"]["versions"]:
            if version.get("served"):
                key = (f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"])
                schemas[key] = _strict(version["schema"]["openAPIV3Schema"])
    return schemas
