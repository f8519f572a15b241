from django.core.management.base import BaseCommand

from a2a_platform.seed import ROTATE_DEMO_SECRET, admin_lines, manage_py, seed_demo


class Command(BaseCommand):
    help = "Create the demo tenant, its agents and an admin user (idempotent)."

    def handle(self, *args, **options):
        result = seed_demo()
        for line in admin_lines(result.admin_password):
            self.stdout.write(f"Admin: {line}")
        if result.demo_client_secret:
            self.stdout.write(
                f"Demo OAuth client created: client_id {result.demo_client_id}, "
                f"client_secret {result.demo_client_secret}  (shown once)"
            )
        else:
            self.stdout.write(f"Demo OAuth client: client_id {result.demo_client_id}")
        self.stdout.write(f"A new demo client secret: {manage_py()} {ROTATE_DEMO_SECRET}")
        self.stdout.write(f"Demo tenant ready with agents: {', '.join(result.agents)}")
