"""Push-notification config operations (Create/Get/List/Delete), registered into operations.METHODS.

Same contract as the other operations: (Call, parsed request proto) -> ProtoJSON
dict, errors as a2a-sdk exceptions. Bindings dispatch by these method names.
"""

from a2a.types import a2a_pb2 as pb

from tasks_app.protocol.auth import check_tenant
from tasks_app.protocol.call import in_one_trip
from tasks_app.push import push_config_create, push_config_delete, push_config_get, push_config_list


@in_one_trip
def create_task_push_notification_config(call, request: pb.TaskPushNotificationConfig) -> dict:
    check_tenant(call, request)
    return push_config_create(call.caller, request)


@in_one_trip
def get_task_push_notification_config(call, request: pb.GetTaskPushNotificationConfigRequest) -> dict:
    check_tenant(call, request)
    return push_config_get(call.caller, request.task_id, request.id)


@in_one_trip
def list_task_push_notification_configs(call, request: pb.ListTaskPushNotificationConfigsRequest) -> dict:
    check_tenant(call, request)
    return push_config_list(
        call.caller,
        request.task_id,
        page_size=request.page_size,
        page_token=request.page_token,
    )


@in_one_trip
def delete_task_push_notification_config(call, request: pb.DeleteTaskPushNotificationConfigRequest) -> dict:
    check_tenant(call, request)
    push_config_delete(call.caller, request.task_id, request.id)
    return {}


PUSH_METHODS: dict = {
    "CreateTaskPushNotificationConfig": (
        pb.TaskPushNotificationConfig,
        create_task_push_notification_config,
        False,
    ),
    "GetTaskPushNotificationConfig": (
        pb.GetTaskPushNotificationConfigRequest,
        get_task_push_notification_config,
        False,
    ),
    "ListTaskPushNotificationConfigs": (
        pb.ListTaskPushNotificationConfigsRequest,
        list_task_push_notification_configs,
        False,
    ),
    "DeleteTaskPushNotificationConfig": (
        pb.DeleteTaskPushNotificationConfigRequest,
        delete_task_push_notification_config,
        False,
    ),
}
