"""``/api/v1/`` routes of projects (included by ``e31site/urls.py`` in the ``api`` namespace)."""
from django.urls import path

from . import views

urlpatterns = [
    path("projects/", views.ProjectListView.as_view(), name="project-list"),
    path("projects/<str:name>/", views.ProjectDetailView.as_view(), name="project-detail"),
    path("projects/<str:name>/members/", views.MemberListView.as_view(), name="project-members"),
    path("projects/<str:name>/members/<str:username>/", views.MemberDetailView.as_view(), name="project-member"),
]
