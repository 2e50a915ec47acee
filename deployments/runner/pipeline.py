"""Run a claimed deployment: check out its code, run its snapshotted steps, record the end.

The order of a run:

1. ``deployment_claim``: under the environment lock, run now, wait (``Snooze``) or drop it.
2. Checkout (``deployments.workspaces.acquire``): the worktree of the resolved commit, or the
   project's workdir. A failure ends the deployment ``failed/git_error``.
3. ``deployment.started``; then each step in order, in its own process group under a
   supervisor, its output streamed into the log. The first failing step (non-zero exit or
   its timeout) ends the run unless it has ``continue_on_error``; the rest are skipped.
4. The log is flushed, and only then the final status is written (so a reader that sees a
   final status knows the log is complete) with its event.

A cancel seen through the heartbeat stops the current step (SIGTERM, grace, SIGKILL) and
ends ``cancelled``; the deployment timeout ends ``failed/timed_out``; a lost lease means the
run is no longer ours: steps are stopped and the dead-job handler owns the outcome.
"""

import logging
import time
from dataclasses import dataclass

from django.db import DatabaseError, close_old_connections, transaction
from django.utils import timezone

from deployments import conf, lifecycle, services, workspaces
from deployments.events import log_deployment
from deployments.git import Interrupted
from deployments.models import Deployment, DeploymentStatus, FailureReason, StepRun, StepStatus
from deployments.policy import Decision
from deployments.runner import masking
from deployments.runner.heartbeat import Beat
from deployments.runner.logwriter import LogWriter
from deployments.runner.masking import SecretMasker
from deployments.runner.process_env import step_process_env
from deployments.runner.step import StepResult, Stop, Watch, run_step
from jobs.errors import Permanent, Snooze
from jobs.task import JobContext

logger = logging.getLogger("deployments")
S = DeploymentStatus
# A run's summary status when its lease was taken away (no final status of ours to report).
LOST = "lost"


@dataclass(frozen=True)
class RunEnd:
    """How a run ends: a final status with its reason and error, or lost (``status`` None).

    A lost run writes no status: the dead-job handler has ended (or will end) the deployment.
    """

    status: DeploymentStatus | None
    reason: FailureReason | None = None
    error: str = ""


def run(*, deployment_id: int, ctx: JobContext) -> dict:
    """Claim and run one deployment for the job in ``ctx``; return a small summary."""
    try:
        claim = services.deployment_claim(deployment_id=deployment_id, job=ctx.job)
    except DatabaseError as exc:  # nothing ran yet: a database blip must not fail the deployment
        close_old_connections()
        raise Snooze(services.wait_seconds(), reason=f"claim failed: {exc!r}") from exc
    if claim.decision is Decision.WAIT:  # already snoozed under the lock; JobTask's is a no-op
        raise Snooze(services.wait_seconds(), reason=f"deployment {deployment_id} waits its turn")
    if claim.decision is not Decision.RUN:
        status = claim.deployment.status if claim.deployment else "missing"
        return {"deployment_id": deployment_id, "ran": False, "status": status}
    deployment = claim.deployment
    try:
        status = Execution(deployment, Beat(ctx)).run()
    except Exception as exc:  # any crash: the deployment must not stay running with its lock
        logger.exception("deployment.runner_crashed", extra={"deployment_id": deployment_id})
        with transaction.atomic():
            lifecycle.finish(
                deployment, S.FAILED, reason=FailureReason.INTERNAL_ERROR, error=repr(exc)
            )
        raise Permanent(f"runner crashed: {exc!r}") from exc
    return {"deployment_id": deployment_id, "ran": True, "status": status}


class Execution:
    """One run of one claimed deployment."""

    def __init__(self, deployment: Deployment, beat: Beat) -> None:
        self.deployment = deployment
        self.project = deployment.project
        self.beat = beat
        self.log = LogWriter(deployment.pk, SecretMasker(masking.project_secrets(self.project)))
        self.deadline = time.monotonic() + deployment.timeout
        grace = self.project.stop_grace
        self.grace = float(grace) if grace is not None else conf.get().stop_grace.total_seconds()

    def run(self) -> str:
        """Check out, run the steps, record the end; return the final status (or ``lost``)."""
        checkout = self._checkout()
        if isinstance(checkout, RunEnd):  # the run ended during checkout
            return self._finish(checkout)
        try:
            end = self._run_steps(str(checkout.path))
        finally:
            workspaces.release(checkout.worktree)
        return self._finish(end)

    def _keep_alive(self) -> None:
        if self.beat.tick() is not None or time.monotonic() >= self.deadline:
            raise Interrupted()

    def _checkout(self) -> workspaces.Checkout | RunEnd:
        """Return the checkout, or how the run ends if it ended here."""
        deployment = self.deployment
        try:
            checkout = workspaces.acquire(deployment, keep_alive=self._keep_alive)
        except workspaces.CheckoutError as exc:
            self.log.line(f"conveyor: checkout failed: {exc}")
            return RunEnd(S.FAILED, exc.reason, str(exc))
        except Interrupted:
            return self._stopped(self._stop_reason(), "during checkout")
        deployment.commit_sha = checkout.commit_sha
        deployment.worktree = checkout.worktree
        deployment.project_dir = str(checkout.path)
        Deployment.objects.filter(pk=deployment.pk).update(
            commit_sha=checkout.commit_sha,
            worktree=checkout.worktree,
            project_dir=deployment.project_dir,
            updated_at=timezone.now(),
        )
        with transaction.atomic():
            lifecycle.announce_started(deployment)
        return checkout

    def _stop_reason(self) -> Stop:
        return self.beat.verdict or Stop.TIMED_OUT

    def _run_steps(self, workdir: str) -> RunEnd:
        runs = list(StepRun.objects.filter(deployment=self.deployment).order_by("position"))
        for run, step in zip(runs, self.deployment.steps, strict=True):
            stop = self.beat.tick(force=True)
            if stop is None and time.monotonic() >= self.deadline:
                stop = Stop.TIMED_OUT
            if stop is not None:
                return self._stopped(stop, f"before step {run.name!r}")
            result = self._run_one(run, step, workdir)
            if result.stopped is Stop.TIMED_OUT and time.monotonic() >= self.deadline:
                return self._stopped(Stop.TIMED_OUT, f"in step {run.name!r}")
            if result.stopped in (Stop.CANCELLED, Stop.LOST, Stop.SHUTDOWN):
                return self._stopped(result.stopped, f"in step {run.name!r}")
            if result.stopped is Stop.TIMED_OUT or result.exit_code != 0:
                reason = (
                    FailureReason.TIMED_OUT
                    if result.stopped is Stop.TIMED_OUT
                    else FailureReason.STEP_FAILED
                )
                if not run.continue_on_error:
                    return RunEnd(S.FAILED, reason, f"step {run.name!r} {self._describe(result)}")
        return RunEnd(S.SUCCESS)

    def _run_one(self, run: StepRun, step: dict, workdir: str) -> StepResult:
        number, total = run.position, len(self.deployment.steps)
        self.log.begin_step(run.pk)
        run.status, run.started_at, run.log_start = StepStatus.RUNNING, timezone.now(), self.log.end
        run.save(update_fields=["status", "started_at", "log_start"])
        log_deployment("deployment.step_started", self.deployment, step=run.name, number=number)
        self.log.line(f"conveyor: step {number}/{total} {run.name}")
        timeout = step.get("timeout")
        deadline = self.deadline
        if timeout:
            deadline = min(deadline, time.monotonic() + float(timeout))
        env = step_process_env(
            deployment=self.deployment,
            project=self.project,
            step=step,
            position=number,
            workdir=workdir,
        )
        result = run_step(
            command=step["command"],
            env=env,
            cwd=workdir,
            grace=self.grace,
            watch=Watch(self.beat, deadline),
            log=self.log,
        )
        if result.error:
            self.log.line(f"conveyor: {result.error}")
        self.log.line(
            f"conveyor: step {run.name} {self._describe(result)} in {result.seconds:.1f}s"
        )
        self.log.flush()  # a held possible secret start waits for the next step's output
        run.status = self._step_status(result)
        run.exit_code, run.finished_at, run.log_end = result.exit_code, timezone.now(), self.log.end
        run.save(update_fields=["status", "exit_code", "finished_at", "log_end"])
        log_deployment(
            "deployment.step_finished",
            self.deployment,
            step=run.name,
            number=number,
            step_status=run.status,
            exit_code=result.exit_code,
            seconds=round(result.seconds, 3),
        )
        return result

    @staticmethod
    def _step_status(result: StepResult) -> StepStatus:
        if result.stopped is Stop.TIMED_OUT:
            return StepStatus.TIMED_OUT
        if result.stopped is not None:
            return StepStatus.CANCELLED
        return StepStatus.SUCCESS if result.exit_code == 0 else StepStatus.FAILED

    @staticmethod
    def _describe(result: StepResult) -> str:
        if result.stopped is Stop.TIMED_OUT:
            return "timed out"
        if result.stopped is Stop.CANCELLED:
            return "was cancelled"
        if result.stopped is Stop.LOST:
            return "was stopped (run lost)"
        if result.stopped is Stop.SHUTDOWN:
            return "was stopped (worker shutdown)"
        if result.exit_code is None:
            return "did not run" if result.error else "ended without an exit code"
        if result.exit_code < 0:
            return f"was killed by signal {-result.exit_code}"
        return f"exited {result.exit_code}"

    @staticmethod
    def _stopped(stop: Stop, where: str) -> RunEnd:
        if stop is Stop.CANCELLED:
            return RunEnd(S.CANCELLED, error=f"cancelled {where}")
        if stop is Stop.LOST:
            return RunEnd(None, error=f"run lost {where}")
        if stop is Stop.SHUTDOWN:
            return RunEnd(S.FAILED, FailureReason.WORKER_SHUTDOWN, f"the worker shut down {where}")
        return RunEnd(S.FAILED, FailureReason.TIMED_OUT, f"deployment timed out {where}")

    def _finish(self, end: RunEnd) -> str:
        self.log.flush(final=True)  # no more step output: release what was held
        if end.error:
            self.log.line(f"conveyor: {end.error}")
        self.log.flush()
        if end.status is None:  # lost: the dead-job handler has ended (or will end) it
            log_deployment("deployment.run_lost", self.deployment, error=end.error)
            return LOST
        reason = end.reason
        if end.status == S.CANCELLED:
            current = Deployment.objects.filter(pk=self.deployment.pk).values_list(
                "failure_reason", flat=True
            )
            reason = current.first() or FailureReason.CANCELLED
        with transaction.atomic():
            done = lifecycle.finish(
                self.deployment, end.status, reason=reason or "", error=end.error
            )
        return done.status if done else end.status
