"""The Settings page's account forms: a new API token's name, the user's e-mail."""
from django import forms

from apps.tokens.models import NAME_MAX


class TokenCreateForm(forms.Form):
    """A new API token."""

    name = forms.CharField(max_length=NAME_MAX, required=False, label="Name",
                           help_text="To tell your tokens apart, e.g. where it is used (\"laptop\", \"CI\").")


class EmailForm(forms.Form):
    """The user's own e-mail address."""

    email = forms.EmailField(required=False, label="E-mail address",
                             help_text="Where notices are sent (see Notices). Leave empty for none.")
