"""The management API for tenant admins, under /api/v1/."""
