import django.core.validators
from django.db import migrations, models

MAX_BODY_BYTES = 50 * 1024 * 1024


def clamp_max_bytes(apps, schema_editor):
    """Crawls saved before the bound fetch at most 50 MB a body from now on, like new ones."""
    Crawl = apps.get_model("crawls", "Crawl")
    Crawl.objects.filter(max_bytes__gt=MAX_BODY_BYTES).update(max_bytes=MAX_BODY_BYTES)


class Migration(migrations.Migration):
    dependencies = [("crawls", "0005_crawl_option_help_texts")]

    operations = [
        migrations.AlterField(
            model_name="crawl",
            name="max_bytes",
            field=models.PositiveIntegerField(
                default=5242880,
                help_text="Bytes; a larger body is cut off there and not parsed. At most 50 MB, "
                "and threads x max bytes at most 256 MB.",
                validators=[
                    django.core.validators.MinValueValidator(1024),
                    django.core.validators.MaxValueValidator(
                        52428800, "At most 52428800 bytes (50 MB)."
                    ),
                ],
            ),
        ),
        migrations.RunPython(clamp_max_bytes, migrations.RunPython.noop),
    ]
