from django.db import migrations


def create_default_channel(apps, schema_editor):
    Channel = apps.get_model("crawls", "Channel")
    Channel.objects.get_or_create(slug="default", defaults={"name": "Default"})


class Migration(migrations.Migration):
    dependencies = [("crawls", "0001_initial")]

    operations = [migrations.RunPython(create_default_channel, migrations.RunPython.noop)]
