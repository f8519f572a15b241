from django.core.management.base import BaseCommand

from a2a_platform.seed import seed_demo


class Command(BaseCommand):
    help = "Create the demo tenant, its agents and an admin user (idempotent)."

    def handle(self, *args, **options):
        result = seed_demo()
        if result.admin_password:
            self.stdout.write(f"Admin user 'admin' created, password: {result.admin_password}")
        if result.demo_client_secret:
            self.stdout.write(
                f"Demo OAuth client created: client_id {result.demo_client_id}, "
                f"client_secret {result.demo_client_secret}  (shown once)"
            )
        self.stdout.write(f"Demo tenant ready with agents: {', '.join(result.agents)}")
