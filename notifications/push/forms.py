"""The admin's "compose notification" form."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib.admin.widgets import AdminSplitDateTime, FilteredSelectMultiple
from django.contrib.auth import get_user_model

from .models import Device

AUDIENCE_SELECTED = "selected"
AUDIENCE_ALL = "all"


class ComposeForm(forms.Form):
    title = forms.CharField(max_length=200)
    body = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}))
    data = forms.CharField(  # type: ignore[assignment]  # a field named like BaseForm.data
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": '{"screen": "orders", "order_id": "42"}'}),
        help_text="Optional key/value pairs for the app, as a JSON object of strings.",
    )
    expires_at = forms.SplitDateTimeField(
        required=False,
        widget=AdminSplitDateTime,
        help_text="Optional. Not sent after this time; devices that were offline do not get it later.",
    )
    collapse_key = forms.CharField(
        required=False,
        max_length=64,
        help_text="Optional. A newer notification with the same key replaces this one.",
    )
    audience = forms.ChoiceField(
        choices=[(AUDIENCE_SELECTED, "Selected users"), (AUDIENCE_ALL, "All active users")],
        initial=AUDIENCE_SELECTED,
        widget=forms.RadioSelect,
    )
    users = forms.ModelMultipleChoiceField(
        queryset=get_user_model().objects.none(),
        required=False,
        widget=FilteredSelectMultiple("users", is_stacked=False),
        help_text="Users with at least one active device.",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        reachable = Device.objects.filter(active=True).values("user_id")
        field = self.fields["users"]
        assert isinstance(field, forms.ModelMultipleChoiceField)
        field.queryset = (
            get_user_model().objects.filter(is_active=True, id__in=reachable).order_by("username")
        )

    def clean_data(self) -> Any:
        text = self.cleaned_data["data"].strip()
        if not text:
            return None
        try:
            return json.loads(text)
        except ValueError as exc:
            raise forms.ValidationError(f"Not valid JSON: {exc}") from exc

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if cleaned.get("audience") == AUDIENCE_SELECTED and not cleaned.get("users"):
            self.add_error("users", "Choose at least one user, or send to all active users.")
        return cleaned
