from django.apps import AppConfig


class AgentApiConfig(AppConfig):
    """The agents' protocol: their endpoints under ``/api/v1/agent/``, report handling, AgentReport."""

    name = "apps.agent_api"
    label = "agent_api"
    verbose_name = "Agent API"
