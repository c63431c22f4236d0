from django.urls import path

app_name = "metering"
urlpatterns: list = []
