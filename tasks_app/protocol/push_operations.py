"""Push-notification config operations (Create/Get/List/Delete), registered into operations.METHODS."""

PUSH_METHODS: dict = {}
