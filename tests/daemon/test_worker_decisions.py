"""The worker's pure decisions: which runners it forgets, what an unexpected exit is
reported as, and how a task ended."""

from __future__ import annotations

from skulk_core.chat.generation import (
    ErrorChunk,
    FinishChunk,
    FinishReason,
    GenerationStats,
    TokenChunk,
)
from skulk_core.cluster.worker_plan import LocalRunnerPhase
from skulk_core.ids import NodeId, RunnerId, TaskId
from skulk_core.placement.rpc_pool import RPC_DONOR_LOST
from skulk_core.state.state import TaskStatus
from skulk_daemon.runner.protocol import ERROR_CANCELLED, Embedded
from skulk_daemon.worker.runners import exit_failure, forgotten
from skulk_daemon.worker.tasks import answer_status, finish_status

TASK = TaskId("t1")
STATS = GenerationStats(
    prompt_tps=1.0,
    generation_tps=1.0,
    prompt_tokens=1,
    generation_tokens=1,
    serving_batches=False,
    in_flight_at_admission=1,
    time_to_first_token_ms=1.0,
)


def _finish(reason: FinishReason) -> FinishChunk:
    return FinishChunk(
        task_id=TASK,
        finish_reason=reason,
        prompt_tokens=1,
        completion_tokens=1,
        stats=STATS,
    )


def test_only_exited_runners_no_longer_assigned_are_forgotten() -> None:
    phases = {
        RunnerId("exited-gone"): LocalRunnerPhase.EXITED,
        RunnerId("exited-assigned"): LocalRunnerPhase.EXITED,
        RunnerId("serving-gone"): LocalRunnerPhase.SERVING,
    }
    assigned = {RunnerId("exited-assigned")}
    assert forgotten(phases, assigned) == [RunnerId("exited-gone")]


def test_an_exit_keeps_its_own_code() -> None:
    assert exit_failure("oom", "out of memory", donor=True, node_id=NodeId("n1")) == (
        "oom",
        "out of memory",
    )


def test_an_exit_without_a_code_is_a_crash() -> None:
    assert exit_failure("", "died", donor=False, node_id=NodeId("n1")) == (
        "runner_crashed",
        "died",
    )


def test_a_donor_that_ends_without_a_code_lost_its_pool_share() -> None:
    code, message = exit_failure("", "died", donor=True, node_id=NodeId("n1"))
    assert code == f"{RPC_DONOR_LOST}:n1"
    assert message == "the RPC donor on node n1 stopped serving its share: died"


def test_a_generation_ends_complete_or_cancelled_at_its_finish_only() -> None:
    assert finish_status(_finish("stop")) is TaskStatus.COMPLETE
    assert finish_status(_finish("length")) is TaskStatus.COMPLETE
    assert finish_status(_finish("cancelled")) is TaskStatus.CANCELLED
    assert finish_status(TokenChunk(task_id=TASK, token_id=1, text="a")) is None
    assert finish_status(ErrorChunk(task_id=TASK, code="x", message="y")) is None


def test_an_answer_ends_its_task_complete_cancelled_or_failed() -> None:
    embedded = Embedded(task_id=TASK, vectors=b"", count=0, dimensions=0, prompt_tokens=0)
    assert answer_status(embedded) is TaskStatus.COMPLETE
    cancelled = ErrorChunk(task_id=TASK, code=ERROR_CANCELLED, message="cancelled")
    assert answer_status(cancelled) is TaskStatus.CANCELLED
    failed = ErrorChunk(task_id=TASK, code="runner_crashed", message="gone")
    assert answer_status(failed) is TaskStatus.FAILED
