"""django-guardian created an "AnonymousUser" account (the setting that turns it off was misnamed):
remove it where it never signed in and holds nothing, so it is no longer listed among accounts."""

from django.conf import settings
from django.db import migrations


def drop_anonymous_user(apps, schema_editor):
    app_label, model_name = settings.AUTH_USER_MODEL.split(".")
    User = apps.get_model(app_label, model_name)
    User.objects.filter(username="AnonymousUser", last_login__isnull=True, is_staff=False,
                        is_superuser=False).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0001_initial"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("guardian", "0002_generic_permissions_index"),
    ]

    operations = [migrations.RunPython(drop_anonymous_user, migrations.RunPython.noop)]
