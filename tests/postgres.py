"""What a test needs to compare its statements with PostgreSQL's own view of them."""


def numbered_placeholders(statement: str) -> str:
    """The statement as PostgreSQL shows a prepared one: ``$1, $2, …`` where psycopg has ``%s``."""
    parts = statement.split("%s")
    numbered = [parts[0]]
    for number, rest in enumerate(parts[1:], start=1):
        numbered.append(f"${number}{rest}")
    return "".join(numbered)
