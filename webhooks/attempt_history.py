"""A delivery's attempts as an operator reads them: numbered through replays, truly labelled.

``DeliveryAttempt.number`` is the attempt number of the job that made it, and a replay gives
the delivery a fresh job, so the stored numbers start again at 1. Here attempts are numbered
1, 2, 3 … across every job of the delivery, and those of a replay's job are marked
``replay`` (with which replay it was). A ``retry`` outcome says another attempt was to come;
on an attempt after which none came (its job ended: attempts spent, the job lost or
cancelled), the label is ``dead`` instead, as the delivery was. A response body that is
JSON is shown indented; any other body as it came (templates escape both).
"""

import json
from dataclasses import dataclass

from webhooks.models import AttemptOutcome, DeliveryAttempt, DeliveryStatus

# The outcome shown for a retryable failure that no retry followed.
NO_RETRY_FOLLOWED = "dead"


@dataclass(frozen=True)
class AttemptRow:
    attempt: DeliveryAttempt
    number: int  # 1, 2, 3 … across the delivery's jobs
    replay: int  # 0 for the first job's attempts, 1 for the first replay's, …
    outcome: str  # the stored outcome, or NO_RETRY_FOLLOWED

    @property
    def response_body(self) -> str:
        """The response body, indented when it is JSON."""
        return pretty_body(self.attempt.response_body)

    @property
    def outcome_note(self) -> str:
        if self.outcome == NO_RETRY_FOLLOWED and self.attempt.outcome == AttemptOutcome.RETRY:
            return "a retryable failure, but no attempt followed: the delivery died"
        return ""


def attempt_rows(attempts: list[DeliveryAttempt], *, delivery_status: str) -> list[AttemptRow]:
    """Return one delivery's attempts (in id order) as rows for its page.

    ``delivery_status`` says whether the last job may still try again (``pending``).
    """
    runs: list[list[DeliveryAttempt]] = []
    for attempt in attempts:
        current = runs[-1] if runs else None
        # A new job (a replay) starts a new run; so would the same job numbering afresh.
        if current is None or (
            attempt.job_id != current[-1].job_id or attempt.number <= current[-1].number
        ):
            runs.append([attempt])
        else:
            current.append(attempt)
    rows = []
    for replay, run in enumerate(runs):
        for attempt in run:
            ended = attempt is run[-1] and (
                run is not runs[-1] or delivery_status != DeliveryStatus.PENDING
            )
            outcome = attempt.outcome
            if ended and outcome == AttemptOutcome.RETRY:
                outcome = NO_RETRY_FOLLOWED
            rows.append(
                AttemptRow(
                    attempt=attempt,
                    number=len(rows) + 1,
                    replay=replay,
                    outcome=outcome,
                )
            )
    return rows


def pretty_body(body: str) -> str:
    """Return ``body`` indented if it is a JSON object or array, else unchanged."""
    stripped = body.strip()
    if not stripped.startswith(("{", "[")):
        return body
    try:
        return json.dumps(json.loads(stripped), indent=2, ensure_ascii=False)
    except (ValueError, RecursionError):  # not JSON, cut at the stored 4 KiB, or too deep
        return body
