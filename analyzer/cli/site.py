"""``barkwatch site``: create, show and validate a device's installation record."""

from __future__ import annotations

import argparse
from pathlib import Path

from analyzer.acoustics import InstallationRecord, load_site, site_template
from sensor.configfile import finite_float
from sensor.errors import ConfigError
from sensor.wire import DEVICE_ID_PATTERN


def add_site_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``site create|show|validate``."""
    site = subparsers.add_parser(
        "site", help="installation records: where the dog, the sensor and the boundary are",
        description="An installation record says where the dog is kept, how far the sensor "
        "and the premises boundary are from there (metres, along the line towards the point "
        "100 ft beyond the boundary), heights, ground and weather. The analyzer carries each "
        "event's sound to that point with it.")
    actions = site.add_subparsers(dest="site_action")
    create = actions.add_parser("create", help="write a commented record to fill in")
    create.add_argument("file", help="record to write (TOML)")
    create.add_argument("--device", required=True, help="device id installed at the site")
    create.add_argument("--address", default="", help="street address of the premises")
    create.add_argument("--sensor-m", type=finite_float, help="dog to sensor, m")
    create.add_argument("--boundary-m", type=finite_float, help="dog to boundary, m")
    create.add_argument("--ground", default="mixed", choices=["hard", "porous", "mixed"])
    create.add_argument("--installed-by", default="", help="officer who installed it")
    create.add_argument("--force", action="store_true", help="overwrite an existing file")
    for name, text in (("show", "print a record with metres and feet"),
                       ("validate", "check a record")):
        action = actions.add_parser(name, help=text)
        action.add_argument("file", help="installation record (TOML)")


def load_site_record(path: str) -> InstallationRecord:
    """Load an installation record (``--site``, ``site show``); its errors call it one."""
    if not Path(path).exists():
        raise ConfigError(
            f"installation record {path} does not exist (barkwatch site create writes one)")
    try:
        return load_site(path)
    except ConfigError as exc:
        text = str(exc).replace(f"config file {path}", f"installation record {path}")
        raise ConfigError(text if path in text else f"installation record {path}: {text}"
                          ) from exc


def run_site(args: argparse.Namespace) -> int:
    """Carry out a ``site`` action."""
    if args.site_action == "create":
        path = Path(args.file)
        if path.exists() and not args.force:
            raise ConfigError(f"{path} exists; use --force to overwrite it")
        if not DEVICE_ID_PATTERN.match(args.device):
            raise ConfigError(f"--device {args.device!r} is not a valid device id (lower-case "
                              "letters, digits, '-' and '_', at most 64 characters)")
        for option, text in (("--address", args.address), ("--installed-by", args.installed_by)):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as exc:  # argv bytes that are not UTF-8 (surrogates)
                raise ConfigError(f"{option} {text[:60]!r} is not UTF-8 text (the record is "
                                  "UTF-8, as TOML requires)") from exc
        from datetime import UTC, datetime

        try:
            path.write_text(site_template(
                args.device, address=args.address, source_to_sensor_m=args.sensor_m or 0.0,
                source_to_boundary_m=args.boundary_m or 0.0, ground=args.ground,
                installed_by=args.installed_by,
                installed_at=datetime.now(UTC).strftime("%Y-%m-%d"),
            ), encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot write {path}: {exc.strerror}") from exc
        missing = [key for key, metres in (("source_to_sensor_m", args.sensor_m),
                                           ("source_to_boundary_m", args.boundary_m))
                   if metres is None]  # fmt: skip
        if missing:
            print(f"wrote {path}; fill in {' and '.join(missing)} (metres from where the dog "
                  f"is kept), then: barkwatch site validate {path}")
            return 0
        record = load_site_record(str(path))  # the distances were given: check them now
        print(f"wrote {path}: valid (dog to sensor {record.source_to_sensor_m:g} m, to "
              f"boundary {record.source_to_boundary_m:g} m); see it with: barkwatch site "
              f"show {path}")
        return 0
    if args.site_action in ("show", "validate"):
        record = load_site_record(args.file)
        print(record.summary() if args.site_action == "show" else f"{args.file}: valid")
        return 0
    raise ConfigError("site needs an action: create, show or validate")
