"""What a turn knows of its task: its messages and artifacts, kept up to date by its batches."""

from dataclasses import dataclass

from tasks_app.models import (
    Artifact,
    Message,
    Task,
)
from tasks_app.protocol.convert import (
    task_dict,
)
from tasks_app.selectors import DEFAULT_HISTORY_LENGTH


@dataclass
class TaskView:
    """What a turn knows of its task's messages and artifacts, in read order, kept up to date by its batches.

    From it the batch that settles the task publishes the task as a reader
    would read it, so a blocking caller is answered without reading it again.
    """

    messages: list[Message]
    artifacts: list[Artifact]

    @classmethod
    def of(cls, task: Task) -> "TaskView":
        """The task's messages and artifacts as stored now (two queries)."""
        return cls(
            messages=list(task.messages.order_by("created_at", "pk")),
            artifacts=list(task.artifacts.order_by("created_at", "pk")),
        )

    def message(self, pk: int) -> Message | None:
        return next((m for m in self.messages if m.pk == pk), None)

    def attach_status_message(self, task: Task) -> None:
        """Give the task its status message from here (it is one of the task's messages), not by a query."""
        if task.status_message_id is not None:
            known = self.message(task.status_message_id)
            if known is not None:
                task.status_message = known

    def add(self, messages: list[Message], artifacts: list[Artifact]) -> None:
        self.messages.extend(messages)
        for artifact in artifacts:
            index = next((i for i, a in enumerate(self.artifacts) if a.pk == artifact.pk), None)
            if index is None:
                self.artifacts.append(artifact)
            else:
                self.artifacts[index] = artifact

    def snapshot(self, task: Task) -> dict:
        """The task as task_snapshot() reads it with historyLength unset."""
        newest = self.messages[-(DEFAULT_HISTORY_LENGTH + 1) :]
        return task_dict(
            task, messages=newest, artifacts=self.artifacts, history_length=DEFAULT_HISTORY_LENGTH
        )
