"""``barkwatch site``: create, show and validate a device's installation record."""

from __future__ import annotations

import argparse
from pathlib import Path

from analyzer.acoustics import InstallationRecord, load_site, site_template
from analyzer.acoustics.attribution import PremisesSector
from analyzer.acoustics.site import describe_sector
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
    sector = create.add_argument_group(
        "the premises' sector (issue 36)",
        "As seen from the sensor, in compass degrees clockwise from north (the north of the "
        "sensor's [array] orientation_deg): either the bearings of the premises' two outer "
        "corners, or the bearing of its centre with its width and distance. Without them no "
        "event is attributed to the premises by bearing.")
    sector.add_argument("--corners", type=finite_float, nargs=2, metavar="DEG",
                        help="compass bearings of the premises' two outer corners")
    sector.add_argument("--premises-bearing", type=finite_float, metavar="DEG",
                        help="compass bearing of the premises' centre (with --premises-width-m)")
    sector.add_argument("--premises-width-m", type=finite_float, metavar="M",
                        help="width of the premises seen square-on from the sensor")
    sector.add_argument("--premises-distance-m", type=finite_float, metavar="M",
                        help="sensor to the premises' centre (default: --sensor-m)")
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


def sector_from_options(args: argparse.Namespace) -> PremisesSector:
    """The sector ``site create`` was given (not entered when none of its options was)."""
    distance = args.premises_distance_m if args.premises_distance_m is not None else (
        args.sensor_m or 0.0)
    by_width = (args.premises_bearing, args.premises_width_m)
    if args.corners is not None:
        if any(v is not None for v in by_width):
            raise ConfigError("--corners gives the sector by itself: leave out "
                              "--premises-bearing and --premises-width-m")
        return PremisesSector.from_corners(args.corners[0], args.corners[1], distance)
    if all(v is None for v in by_width):
        if args.premises_distance_m is not None:
            raise ConfigError("--premises-distance-m needs --corners or --premises-bearing "
                              "with --premises-width-m")
        return PremisesSector()
    if any(v is None for v in by_width):
        raise ConfigError("--premises-bearing and --premises-width-m come together (or give "
                          "--corners)")
    if not 0.0 <= args.premises_bearing <= 360.0:
        raise ConfigError(f"--premises-bearing {args.premises_bearing}: a compass bearing is "
                          "0-360 degrees")
    if distance <= 0:
        raise ConfigError("--premises-width-m needs the distance to the premises: give "
                          "--premises-distance-m (or --sensor-m)")
    return PremisesSector.from_width(args.premises_bearing, args.premises_width_m, distance)


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

        sector = sector_from_options(args)
        try:
            path.write_text(site_template(
                args.device, address=args.address, source_to_sensor_m=args.sensor_m or 0.0,
                source_to_boundary_m=args.boundary_m or 0.0, ground=args.ground,
                installed_by=args.installed_by,
                installed_at=datetime.now(UTC).strftime("%Y-%m-%d"), sector=sector,
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
              f"boundary {record.source_to_boundary_m:g} m; premises sector "
              f"{describe_sector(record.sector)}); see it with: barkwatch site show {path}")
        return 0
    if args.site_action in ("show", "validate"):
        record = load_site_record(args.file)
        print(record.summary() if args.site_action == "show" else f"{args.file}: valid")
        return 0
    raise ConfigError("site needs an action: create, show or validate")
