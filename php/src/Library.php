<?php
declare(strict_types=1);

namespace Outbox;

/**
 * Finds and loads liboutbox through FFI.
 *
 * The library, first found wins:
 *   1. the path given to Outbox's constructor;
 *   2. the environment: OUTBOX_LIB (a set but missing path is an error, never skipped);
 *   3. the path given to Library::configure() (e.g. in your bootstrap or preload script);
 *   4. the usual install locations: this checkout's _install/lib, then /usr/local/lib, /usr/lib,
 *      their multiarch directories (/usr/lib/x86_64-linux-gnu, ...) and lib64, each as
 *      liboutbox.so.0 then liboutbox.so.
 * The header: OUTBOX_FFI_HEADER, then Library::configure()'s, then the one shipped in this package
 * (include/outbox_ffi.h, a copy of the outbox_ffi.h the build generates).
 *
 * Under FPM/CGI (ffi.enable=preload, PHP's default) FFI::cdef is refused: php.ini's ffi.preload names
 * the scope header (bin/outbox-ffi-header writes it) or opcache.preload runs preload.php, the library
 * is loaded once at server start, and every request takes it with FFI::scope(SCOPE).
 */
final class Library
{
    public const SCOPE = 'OUTBOX';
    private const NAMES = ['liboutbox.so.0', 'liboutbox.so'];

    private static ?string $library = null;
    private static ?string $header = null;

    /** Sets the paths searched after the environment (null leaves that one to the search). */
    public static function configure(?string $library, ?string $header = null): void
    {
        self::$library = $library;
        self::$header = $header;
    }

    /** The header shipped with this package. */
    public static function shippedHeader(): string
    {
        return dirname(__DIR__) . '/include/outbox_ffi.h';
    }

    /** The library's path by the search above; LoadException lists where it looked when it finds none. */
    public static function findLibrary(?string $explicit = null): string
    {
        $looked = [];
        foreach (['the argument' => $explicit, 'OUTBOX_LIB' => self::env('OUTBOX_LIB'),
                  'Library::configure()' => self::$library] as $from => $path) {
            if ($path === null || $path === '') {
                $looked[] = "$from (not set)";
                continue;
            }
            if (is_file($path)) {
                return $path;
            }
            throw new LoadException("liboutbox not found: $from names $path, which does not exist");
        }
        foreach (self::installDirs() as $dir) {
            foreach (self::NAMES as $name) {
                $looked[] = "$dir/$name";
                if (is_file("$dir/$name")) {
                    return "$dir/$name";
                }
            }
        }
        throw new LoadException("liboutbox not found; looked in:\n  " . implode("\n  ", $looked)
            . "\nSet OUTBOX_LIB to the library's path (liboutbox.so.0), call Outbox\\Library::configure(), or install it"
            . ' (scripts/build.sh release installs into the checkout\'s _install/)');
    }

    /** The header's path: OUTBOX_FFI_HEADER, Library::configure()'s, or the shipped one. */
    public static function findHeader(?string $explicit = null): string
    {
        foreach (['the argument' => $explicit, 'OUTBOX_FFI_HEADER' => self::env('OUTBOX_FFI_HEADER'),
                  'Library::configure()' => self::$header, 'the package' => self::shippedHeader()] as $from => $path) {
            if ($path === null || $path === '') {
                continue;
            }
            if (!is_file($path)) {
                throw new LoadException("outbox_ffi.h not found: $from names $path, which does not exist");
            }
            return $path;
        }
        throw new \LogicException('unreachable: the shipped header is always a candidate');
    }

    /** The install directories searched, in order. */
    public static function installDirs(): array
    {
        $arch = php_uname('m');
        $triplet = match ($arch) {
            'aarch64', 'arm64' => 'aarch64-linux-gnu',
            'armv7l' => 'arm-linux-gnueabihf',
            default => "$arch-linux-gnu",
        };
        $dirs = [dirname(__DIR__, 2) . '/_install/lib', dirname(__DIR__, 2) . "/_install/lib/$triplet"];
        foreach (['/usr/local', '/usr'] as $prefix) {
            array_push($dirs, "$prefix/lib", "$prefix/lib/$triplet", "$prefix/lib64");
        }
        return $dirs;
    }

    /**
     * The FFI instance: the preloaded scope when there is one (and no explicit path was asked for),
     * else FFI::cdef over the header and library found above, where this request may call it.
     */
    public static function load(?string $library = null, ?string $header = null): \FFI
    {
        if (!extension_loaded('ffi')) {
            throw new LoadException('the PHP extension ffi is not loaded: install or enable it (extension=ffi)');
        }
        $mode = strtolower((string)ini_get('ffi.enable'));
        if (in_array($mode, ['0', '', 'off', 'false', 'no'], true)) {
            throw new LoadException('FFI is disabled (ffi.enable=' . ini_get('ffi.enable') . '): set ffi.enable=preload'
                . ' and preload the library with opcache.preload (see the package README), or ffi.enable=1');
        }
        if ($library === null && $header === null && self::preloaded()) {
            return \FFI::scope(self::SCOPE);
        }
        $cli = in_array(PHP_SAPI, ['cli', 'phpdbg', 'embed'], true);
        if ($mode === 'preload' && !$cli) {
            throw new LoadException('FFI is restricted to preloaded code under ' . PHP_SAPI . ' with ffi.enable=preload,'
                . ' and liboutbox was not preloaded (no FFI scope ' . self::SCOPE . '): set opcache.preload='
                . dirname(__DIR__) . '/preload.php, and ffi.preload=FILE with the header '
                . dirname(__DIR__) . '/bin/outbox-ffi-header FILE writes (see the package README)');
        }
        $library = self::findLibrary($library);
        return \FFI::cdef((string)file_get_contents(self::findHeader($header)), $library);
    }

    /**
     * The shipped header with FFI_SCOPE and FFI_LIB (the library found by the search, as an absolute
     * path) prepended, written to $path: the file php.ini's ffi.preload names, for FPM/CGI under
     * ffi.enable=preload. Requests then take the library with FFI::scope(SCOPE). Returns the library.
     */
    public static function writeScopeHeader(string $path, ?string $library = null): string
    {
        $library = self::findLibrary($library);
        $library = str_starts_with($library, '/') ? $library : getcwd() . '/' . $library;
        $code = '#define FFI_SCOPE "' . self::SCOPE . "\"\n#define FFI_LIB \"$library\"\n"
            . (string)file_get_contents(self::findHeader());
        $tmp = @tempnam(dirname($path), '.outbox_ffi_');
        if ($tmp === false || file_put_contents($tmp, $code) !== strlen($code) || !chmod($tmp, 0644) || !rename($tmp, $path)) {
            throw new LoadException("cannot write the FFI scope header $path");
        }
        return $library;
    }

    /**
     * For opcache.preload (preload.php) where the server's master does not run as root: FFI::load of
     * the scope header, written to $cacheDir (OUTBOX_FFI_CACHE, else the temp dir). PHP refuses
     * FFI::load under opcache.preload_user (a root master): use ffi.preload there.
     */
    public static function preload(?string $library = null, ?string $cacheDir = null): string
    {
        $cacheDir ??= self::env('OUTBOX_FFI_CACHE') ?? sys_get_temp_dir();
        $path = "$cacheDir/outbox_ffi_scope_" . getmypid() . '.h';
        $library = self::writeScopeHeader($path, $library);
        try {
            \FFI::load($path);
        } finally {
            unlink($path);
        }
        return $library;
    }

    private static function preloaded(): bool
    {
        try {
            \FFI::scope(self::SCOPE);
            return true;
        } catch (\FFI\Exception) {
            return false;
        }
    }

    private static function env(string $name): ?string
    {
        $value = getenv($name);
        return $value === false || $value === '' ? null : $value;
    }
}
