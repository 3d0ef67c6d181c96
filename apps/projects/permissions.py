"""Every permission of the product, and the built-in roles: the one list.

A permission is a named action on a kind of object inside a project. A role is a named set
of permissions granted to a member of a project. Later capabilities add their actions here.
"""

from dataclasses import dataclass

PERMISSIONS: dict[str, str] = {
    "project.view": "See the project, its members and its dashboard",
    "project.edit": "Rename the project and edit its description",
    "project.archive": "Archive or restore the project",
    "project.delete": "Delete the project and everything in it",
    "member.manage": "Invite, remove and change the roles of members",
    "owner.manage": "Make or unmake owners",
    "role.manage": "Create and edit custom roles",
    "token.manage": "Create and revoke the project's API tokens",
    "audit.view": "Read and export the audit log",
    "dataset.view": "Browse datasets and their versions",
    "dataset.import": "Create datasets and import data",
    "dataset.edit": "Edit rows, splits and redactions (new versions)",
    "dataset.export": "Download dataset versions",
    "dataset.delete": "Delete datasets",
    "campaign.manage": "Create and run annotation campaigns",
    "annotation.submit": "Work the annotation queues assigned to you",
    "annotation.review": "Review, accept and correct annotations",
    "model.view": "See registered models and adapters",
    "model.register": "Register base models",
    "model.delete": "Delete models and adapters",
    "model.download": "Download trained weights (an adapter's files)",
    "model.generate": "Generate with models: the playground and the OpenAI-compatible API",
    "model.enable": "Enable models of the site's catalogue for the project (and disable them)",
    "model.share": "Share the project's adapters with another project (a grant to that project)",
    "model.alias": "Create and move the project's model aliases (not the protected ones)",
    "model.promote": "Move protected aliases (production) and protect or unprotect aliases",
    "job.view": "See fine-tune jobs and their metrics",
    "job.launch": "Launch fine-tune jobs",
    "job.cancel": "Cancel fine-tune jobs",
    "compare.view": "See comparisons and leaderboards",
    "compare.run": "Run comparisons",
    "compare.vote": "Vote in comparisons assigned to you",
    "provider.use": "Send prompts to the outside model providers a site admin enabled for the project",
}

VIEWER = frozenset({"project.view", "dataset.view", "model.view", "job.view", "compare.view"})
ANNOTATOR = frozenset({"project.view", "annotation.submit", "compare.vote"})
SCIENTIST = VIEWER | ANNOTATOR | {
    "dataset.import", "dataset.edit", "dataset.export", "model.register", "model.download", "model.generate",
    "model.alias",
    "job.launch",
    "job.cancel", "compare.run", "campaign.manage", "annotation.review", "provider.use",
}
ADMIN = SCIENTIST | {
    "project.edit", "project.archive", "member.manage", "role.manage", "token.manage",
    "audit.view", "dataset.delete", "model.delete", "model.enable", "model.share", "model.promote",
}
OWNER = frozenset(PERMISSIONS)


# Voting is blind: a voter sees the pairs put to them, not the comparison.
BLIND = frozenset({"compare.vote"})


def implied_by(permission: str) -> frozenset[str]:
    """What a permission cannot work without: every action needs to see its project, and acting
    on datasets, models, jobs or comparisons needs to see them (`model.generate` finds the model
    by name among the ones it may view)."""
    kind = permission.split(".")[0]
    needs = {"project.view"} if permission != "project.view" else set()
    view = {"model": "model.view", "dataset": "dataset.view", "job": "job.view", "compare": "compare.view"}.get(kind)
    if view and view != permission and permission not in BLIND:
        needs.add(view)
    return frozenset(needs)


def with_implied(permissions) -> frozenset[str]:
    """The permissions and everything they imply (a token's set, so that it works as asked)."""
    return frozenset(permissions).union(*(implied_by(p) for p in permissions))


@dataclass(frozen=True)
class BuiltinRole:
    key: str
    name: str
    description: str
    permissions: frozenset[str]


BUILTIN_ROLES: dict[str, BuiltinRole] = {
    role.key: role
    for role in [
        BuiltinRole("owner", "Owner", "Everything, including deleting the project and managing owners.", OWNER),
        BuiltinRole("admin", "Admin", "Members, roles, tokens and the audit log, plus all Scientist permissions.", ADMIN),
        BuiltinRole("scientist", "Scientist", "Datasets, models, fine-tune jobs, comparisons and campaigns.", SCIENTIST),
        BuiltinRole("annotator", "Annotator", "Works annotation queues and votes in comparisons assigned to them.", ANNOTATOR),
        BuiltinRole("viewer", "Viewer", "Read only.", VIEWER),
    ]
}

ROLE_CHOICES = [(role.key, role.name) for role in BUILTIN_ROLES.values()]

assert all(p in PERMISSIONS for role in BUILTIN_ROLES.values() for p in role.permissions)
assert all(with_implied(role.permissions) == role.permissions for role in BUILTIN_ROLES.values())


# --- object grants (django-guardian) ---------------------------------------------------------
# A grant gives one person one permission on one object (a dataset, model or job) without a
# project role. Guardian stores Django permissions, whose codenames cannot hold a dot.

def codename(permission: str) -> str:
    return permission.replace(".", "_")


def permission_from_codename(code: str) -> str:
    kind, _, action = code.partition("_")
    return f"{kind}.{action}"


def object_permission_choices(kind: str) -> list[tuple[str, str]]:
    """Django `Meta.permissions` for a grantable model: the catalogue's `<kind>.*` actions."""
    return [(codename(name), text) for name, text in PERMISSIONS.items() if name.startswith(f"{kind}.")]


# Kinds of objects a grant can name, and their models (app_label.ModelName).
GRANTABLE = {"dataset": "datasets.Dataset", "model": "registry.RegisteredModel"}


def grantable_model(kind: str):
    from django.apps import apps

    return apps.get_model(GRANTABLE[kind])


def kind_of(obj) -> str | None:
    label = obj._meta.label
    return next((kind for kind, model in GRANTABLE.items() if model == label), None)
