from django.urls import reverse

# The main sections, in navigation order. A section without a route yet is shown greyed
# out so people see where the product is going; each capability fills in its own.
SECTIONS = [
    ("projects", "Projects", "projects:list"),
    ("datasets", "Datasets", "datasets:all"),
    ("annotation", "Annotation", "annotation:all"),
    ("jobs", "Jobs", "training:all"),
    ("models", "Models", "registry:all"),
    ("compare", "Compare", "comparison:all"),
]


def navigation(request):
    if not getattr(request, "user", None) or not request.user.is_authenticated:
        return {"nav_sections": []}
    current = getattr(request, "nav_section", None) or request.resolver_match and request.resolver_match.namespace
    sections = [
        {"key": key, "label": label, "url": reverse(route) if route else None, "active": key == current}
        for key, label, route in SECTIONS
    ]
    if request.user.is_staff:
        # Operator data across projects: only site staff see (and may open) Monitoring.
        sections.append({"key": "monitoring", "label": "Monitoring", "url": reverse("monitoring:overview"),
                         "active": current == "monitoring"})
        sections.append({"key": "providers", "label": "Providers", "url": reverse("providers:list"),
                         "active": current == "providers"})
        sections.append({"key": "admin", "label": "Admin", "url": reverse("accounts:users"),
                         "active": current == "accounts" and request.path.startswith("/accounts/users")})
    return {"nav_sections": sections}
