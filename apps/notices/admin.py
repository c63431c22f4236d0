from django.contrib import admin

from .models import NoticePreference


@admin.register(NoticePreference)
class NoticePreferenceAdmin(admin.ModelAdmin):
    list_display = ("owner", "email_on_release")
    search_fields = ("owner__username", "owner__email")
