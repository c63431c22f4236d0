"""The notice settings form."""
from django import forms


class NoticeForm(forms.Form):
    """The user's notice settings."""

    email_on_release = forms.BooleanField(
        required=False, label="E-mail me when a job of mine is released, or my spend passes my alert threshold",
        help_text="Sent to the address of your account.")
