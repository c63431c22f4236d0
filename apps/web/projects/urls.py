"""The projects pages (issue 25). Mounted at ``/projects/``."""
from django.urls import path

from apps.web.projects import views

app_name = "projects"
urlpatterns = [
    path("", views.projects_page, name="list"),
    path("<str:name>/", views.project_page, name="detail"),
    path("<str:name>/statement/", views.project_statement_page, name="statement"),
    path("<str:name>/members/<str:username>/", views.member_change, name="member"),
]
