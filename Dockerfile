FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md manage.py ./
COPY a2a_platform a2a_platform
COPY tenants tenants
COPY agents agents
COPY tasks_app tasks_app
COPY templates templates
RUN pip install --no-cache-dir .
ENV DEBUG=false
EXPOSE 8000 50051
CMD ["python", "manage.py", "webserve", "--host", "0.0.0.0", "--port", "8000"]
