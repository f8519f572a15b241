"""The worker side: run one agent turn and make every event it emits durable.

A turn is started by a user message. A worker claims it with a conditional
UPDATE that counts an attempt and takes a lease (a redelivered job finds it
claimed and returns; on PostgreSQL the UPDATE and the turn's first read are
one statement), then runs it on its thread's own loop (engine.run_here,
its database calls on that thread): it builds
the a2a-sdk RequestContext and runs the handler's AgentExecutor.execute()
with a TurnEventQueue.

Events are stored in batches: what the agent emits in one burst is written in
one transaction (the task's row locked, the log appended with one INSERT, the
task updated once) a few milliseconds after the burst's first event, and at
once for an event that ends or interrupts the task; the batch is published
after commit. Every batch checks that this worker still holds the turn's
lease, so a worker that lost it (presumed dead, its turn run again
elsewhere) writes nothing more.

While the agent runs, a watcher renews the lease every A2A_TURN_HEARTBEAT
seconds, listens for the task's cancellation, and stops the turn at the
agent's time limit. A turn whose lease was not renewed in time (the database
is out of reach) has its agent stopped before the lease lapses (run.Fence),
so no two executions of one turn ever work at the same time. A stopped agent
gets STOP_TIMEOUT seconds to let go of its cancellation; one that swallows it
is abandoned on its thread's loop, which the thread closes once the turn is
over (it never runs again), and the worker thread is free again.

A turn run again (attempt 2 or later, after its worker was lost) first undoes
what the lost attempt wrote to the task (its agent messages, artifact changes
and task metadata; its log entries stay, the log is append-only) and logs a
WORKING status that says so. Agent authors: execute() may run more than once
for one turn.

A task canceled while no turn runs (it waits for input, or its turn is still
queued) gets its agent's cancel() from a job of its own (agent_cancel), so an
agent holding something outside the platform (the a2a_proxy agent's remote
task) can let it go.

The package, in the order a turn goes through it: lease (claim, lease, the
task's lock, tries through an outage), setup (the turn read and set up), run
(execute() driven and watched), view and batches (its events stored), closing
(a turn that did not settle its task), cancel (the agent's cancel()).
"""

from tasks_app.turns.batches import TurnEventQueue, events_store
from tasks_app.turns.cancel import agent_cancel
from tasks_app.turns.closing import task_fail, turn_finish
from tasks_app.turns.lease import Turn, lock_task, owned_turn, turn_claim
from tasks_app.turns.run import turn_run
from tasks_app.turns.view import TaskView

__all__ = [
    "TaskView",
    "Turn",
    "TurnEventQueue",
    "agent_cancel",
    "events_store",
    "lock_task",
    "owned_turn",
    "task_fail",
    "turn_claim",
    "turn_finish",
    "turn_run",
]
