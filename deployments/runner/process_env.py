"""Build the process environment variables a step runs with: never the worker's whole set.

"Environment" here is the OS environment of the step's process (its variables), not a
deploy target (``deployments.environments``).
"""

import re

from deployments.models import Deployment, Project
from project import env as worker_env

# Taken from the worker's environment when set there; nothing else of it reaches a step.
ALLOWED = ("PATH", "HOME", "LANG", "LC_ALL", "TZ")
DEFAULTS = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _strings(values: dict | None) -> dict[str, str]:
    return {
        str(k): "" if v is None else str(v)
        for k, v in (values or {}).items()
        if NAME.fullmatch(str(k))
    }


def step_process_env(
    *, deployment: Deployment, project: Project, step: dict, position: int, workdir: str
) -> dict[str, str]:
    """Return the variables for one step, later layers winning.

    Layers: the allow-list, project env, step env, ``CONVEYOR_PARAM_<NAME>`` for each param,
    project secrets, and finally ``CONVEYOR_*`` facts about the deployment (not overridable).
    """
    env = dict(DEFAULTS)
    env.update(worker_env.inherited(ALLOWED))
    env.update(_strings(project.env))
    env.update(_strings(step.get("env")))
    env.update({f"CONVEYOR_PARAM_{k.upper()}": v for k, v in _strings(deployment.params).items()})
    env.update(_strings(project.secrets))
    env.update(
        {
            "CI": "true",
            "CONVEYOR": "true",
            "CONVEYOR_DEPLOYMENT_ID": str(deployment.pk),
            "CONVEYOR_PROJECT": project.slug,
            "CONVEYOR_ENVIRONMENT": deployment.environment,
            "CONVEYOR_REF": deployment.ref,
            "CONVEYOR_COMMIT_SHA": deployment.commit_sha,
            "CONVEYOR_PIPELINE": deployment.pipeline_name,
            "CONVEYOR_ATTEMPT": str(deployment.attempt),
            "CONVEYOR_TRIGGERED_BY": deployment.triggered_by,
            "CONVEYOR_STEP": str(step.get("name", "")),
            "CONVEYOR_STEP_NUMBER": str(position),
            "CONVEYOR_WORKDIR": workdir,
        }
    )
    return env
