from django.urls import path

app_name = "pool"
urlpatterns: list = []
