from django.contrib import admin

from apps.projects.models import AuditEvent, Membership, Project


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ["name", "created_at", "archived_at"]
    search_fields = ["name"]
    inlines = [MembershipInline]


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    """Read-only: the audit log cannot be edited or deleted through the product."""

    list_display = ["created_at", "actor", "action", "project", "target_repr", "ip_address"]
    list_filter = ["action"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
