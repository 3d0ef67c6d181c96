from django.contrib import admin

from apps.accounts.models import ApiToken, Invitation


@admin.register(Invitation)
class InvitationAdmin(admin.ModelAdmin):
    list_display = ["username", "email", "created_at", "expires_at", "used_at"]
    exclude = ["token_hash"]
    readonly_fields = ["used_at", "user"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["name", "user", "project", "key_id", "created_at", "expires_at", "revoked_at"]
    exclude = ["key_hash"]
