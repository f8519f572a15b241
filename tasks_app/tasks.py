from celery import shared_task

from tasks_app.turns import turn_run, turn_sweep


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def run_turn(task_id: str, message_pk: int) -> None:
    turn_run(task_id=task_id, message_pk=message_pk)


@shared_task(ignore_result=True)
def sweep_turns() -> dict:
    return turn_sweep()
